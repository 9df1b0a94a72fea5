#!/usr/bin/env python3
"""Checks that ctgraph's header folders read as layers, each using only the ones below it:

    include/  the API users call (ctgraph.hpp, nn/, attention, training, file formats)
       |
    ops/      one primitive per header (shape rule, forward, vector-Jacobian product)
       |
    graph/    the engine and what it stands on (op contract, memory, parameters, kernels)

A header in graph/ may include only graph/ headers; one in ops/ may include ops/ and graph/; one in
include/ anything. Every `#include "ctgraph/..."` (or <ctgraph/...>) must name a header of one of the
three folders. Prints each violation with its file and line; exits 1 if there is any.

    scripts/check_layers.py [ROOT]      (ROOT: the source tree, default: this script's parent)
"""
import os
import re
import sys

LAYERS = ["graph", "ops", "include"]  # bottom to top
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](ctgraph/[^>"]+)[>"]')


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    owner = {}  # "ctgraph/x.hpp" -> layer
    for layer in LAYERS:
        for folder, _, files in os.walk(os.path.join(root, layer)):
            for f in files:
                if f.endswith(".hpp"):
                    rel = os.path.relpath(os.path.join(folder, f), os.path.join(root, layer))
                    if rel in owner:
                        print(f"{layer}/{rel}: also in {owner[rel]}/ (one header, one folder)")
                        return 1
                    owner[rel] = layer
    if not owner:
        print(f"check_layers: no headers under {root}")
        return 1
    problems = 0
    for rel, layer in sorted(owner.items()):
        with open(os.path.join(root, layer, rel), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                if target not in owner:
                    print(f"{layer}/{rel}:{number}: includes {target}, which no layer holds")
                    problems += 1
                elif LAYERS.index(owner[target]) > LAYERS.index(layer):
                    print(f"{layer}/{rel}:{number}: includes {target} from {owner[target]}/, a layer above "
                          f"{layer}/ (allowed: {', '.join(l + '/' for l in LAYERS[:LAYERS.index(layer) + 1])})")
                    problems += 1
    print(f"check_layers: {len(owner)} headers, {problems} layering violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
