#!/usr/bin/env python3
# make_hf_ids_fixture.py - tests/data/hf_ids: a tiny HF `datasets` save_to_disk directory in the
# shape of FLA's preprocessed FineWeb-Edu (an `input_ids` list column next to `text`), written
# in 2 shards, for `kda tokenize --input DIR --json-key input_ids` (tests/test_import_arrow.c).
#
#   python3 -m venv /tmp/dsvenv && /tmp/dsvenv/bin/pip install datasets tokenizers
#   /tmp/dsvenv/bin/python tools/reference/make_hf_ids_fixture.py          (from the repo root)
#
# The ids are HF tokenizers' encoding of the texts with the shipped Llama 3.2-style tokenizer
# (BOS first, no EOS: FLA's layout), so the test can also check that tokenizing the `text`
# column gives the same .bin.
import json

from datasets import Dataset
from tokenizers import Tokenizer

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Hello", "",
         "Call me Ishmael. Some years ago—never mind how long precisely", "日本語のテキスト"]


def main():
    tok = Tokenizer.from_file("assets/tokenizers/llama3/tokenizer.json")
    ids = [tok.encode(t).ids if t else [] for t in TEXTS]
    ds = Dataset.from_dict({"text": TEXTS, "input_ids": ids})
    ds.save_to_disk("tests/data/hf_ids", num_shards=2)
    with open("tests/data/hf_ids/expected.json", "w", encoding="utf-8") as f:
        json.dump({"input_ids": ids}, f)


if __name__ == "__main__":
    main()
