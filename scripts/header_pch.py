#!/usr/bin/env python3
"""What the header check (tests/CMakeLists.txt) may read precompiled without hiding a missing include.

The header check compiles every public header alone, so a header that forgets an include fails to
compile. Most of that time is spent parsing the standard library and xsimd (about 0.7 s of a 1.1 s
unit), which a precompiled header would save; but a precompiled header also hides every include a
header forgets that the precompiled one holds. Not these: for the group of headers that include
ANCHOR through their own includes, the external headers (standard library, third-party) that every
one of them includes anyway, through its own includes. Each header of the group compiles alone with
those whether or not they are read first, so reading them precompiled changes no verdict.

Only includes outside any #if count (an include under a condition may not be there), which can only
shrink the group and the shared set.

    scripts/header_pch.py ROOT ANCHOR

prints two lines: the shared external headers, and the group's headers (relative to ROOT, as
include/ctgraph/x.hpp), each comma-separated.
"""
import os
import re
import sys

FOLDERS = ["include", "graph", "ops"]
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
OPEN = re.compile(r"^\s*#\s*if")
CLOSE = re.compile(r"^\s*#\s*endif")


def unconditional_includes(path):
    found, depth = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if OPEN.match(line):
                depth += 1
            elif CLOSE.match(line):
                depth -= 1
            elif depth == 0:
                m = INCLUDE.match(line)
                if m:
                    found.append(m.group(1))
    return found


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, anchor = sys.argv[1], sys.argv[2]
    headers = {}  # "ctgraph/x.hpp" -> "include/ctgraph/x.hpp"
    for folder in FOLDERS:
        for d, _, files in os.walk(os.path.join(root, folder)):
            for f in files:
                if f.endswith(".hpp"):
                    path = os.path.join(d, f)
                    headers[os.path.relpath(path, os.path.join(root, folder))] = os.path.relpath(path, root)
    direct = {h: unconditional_includes(os.path.join(root, p)) for h, p in headers.items()}
    closure = {}

    def reach(h):  # every header h includes, directly or through ours
        if h not in closure:
            closure[h] = set()
            found = set()
            for d in direct[h]:
                found.add(d)
                if d in headers:
                    found |= reach(d)
            closure[h] = found
        return closure[h]

    group = sorted(h for h in headers if anchor in reach(h))
    shared = None
    for h in group:
        external = {d for d in reach(h) if d not in headers}
        shared = external if shared is None else shared & external
    print(",".join(sorted(shared or [])))
    print(",".join(headers[h] for h in group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
