#!/usr/bin/env python3
# autotokenizer_check.py - checks that a directory written by `kda export` gives, under
# transformers' AutoTokenizer (what lm-eval's HF backend and FLA load), the same ids as HF
# `tokenizers` on the golden cases (tests/data/tok/post_processor_goldens.jsonl, the "with"
# ids = add_special_tokens=True, and the "without" ids).
#
#   python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install transformers
#   build/kda export --checkpoint CKPT --output HF_DIR --tokenizer assets/tokenizers/llama3/tokenizer.json
#   /tmp/tfvenv/bin/python tools/reference/autotokenizer_check.py HF_DIR [--tok llama3]
#
# Exit status 1 on the first mismatch (printed).
import argparse
import json
import sys

from transformers import AutoTokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tok", default="llama3", help="the goldens' tokenizer name")
    ap.add_argument("--goldens", default="tests/data/tok/post_processor_goldens.jsonl")
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(a.dir)
    n = 0
    for line in open(a.goldens, encoding="utf-8"):
        case = json.loads(line)
        if case["tok"] != a.tok:
            continue
        got_with = tok(case["text"])["input_ids"]
        got_without = tok(case["text"], add_special_tokens=False)["input_ids"]
        if got_with != case["with"] or got_without != case["without"]:
            print(f"mismatch on {case['text']!r}: {got_with} / {got_without} vs "
                  f"{case['with']} / {case['without']}")
            return 1
        n += 1
    print(f"{n} cases: AutoTokenizer({a.dir}) gives the HF tokenizers ids with and without "
          f"special tokens ({type(tok).__name__})")
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())
