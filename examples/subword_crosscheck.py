#!/usr/bin/env python3
"""Cross-checks subword_gpt's SentencePiece encoding (the C++ library) against Python's sentencepiece
on the same model: the ids of a few sentences and of the whole validation text must agree, and
Python must decode them back to the text.

    subword_crosscheck.py SUBWORD_GPT MODEL TEXT_FILE
"""
import subprocess
import sys

import sentencepiece as spm


def main():
    binary, model, text_file = sys.argv[1:4]
    sp = spm.SentencePieceProcessor(model_file=model)
    raw = open(text_file, "rb").read().decode("latin-1")
    # chars::read_string: every byte but '\n' and printable ASCII reads as ' '; the last 10 % validates
    text = "".join(c if c == "\n" or " " <= c <= "~" else " " for c in raw)
    validation = text[len(text) - len(text) // 10:]
    samples = ["The licensee may modify the Program.", "  two spaces,\nthen a new line\n\n", "GNU GPL v3 (2007)",
               "zqxj unusual wordz", validation]
    failed = 0
    for s in samples:
        out = subprocess.run([binary, "encode", model, s], check=True, capture_output=True, text=True).stdout
        cpp = [int(t) for t in out.split()]
        py = sp.encode(s)
        ok = cpp == py and sp.decode(cpp) == s
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {len(s):6d} chars, {len(py):5d} ids: {s[:40]!r}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
