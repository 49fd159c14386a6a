#!/usr/bin/env python3
# post_processor_reference.py - golden ids for tokenizer.json post-processors (HF
# add_special_tokens=True vs False) from the PyPI `tokenizers` package, for tests/test_tok_post.c.
#
#   python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
#   /tmp/tokvenv/bin/python tools/reference/post_processor_reference.py     (from the repo root)
#
# Writes tests/data/tok/post_processor_goldens.jsonl, one line per (tokenizer, text):
#   {"tok": NAME, "text": TEXT, "with": [ids], "without": [ids]}
# "with" = Tokenizer.encode(text).ids (add_special_tokens=True, HF's default), "without" =
# encode(text, add_special_tokens=False). Tokenizers (NAME):
#   llama3           assets/tokenizers/llama3/tokenizer.json (Llama 3.2's BOS template)
#   gpt2             assets/tokenizers/gpt2/tokenizer.json (post_processor null)
#   gpt2+template    gpt2 with TemplateProcessing "<|endoftext|> $A <|endoftext|>"
#   gpt2+roberta     gpt2 with RobertaProcessing (cls and sep = <|endoftext|> 50256)
#   gpt2+seq         gpt2 with Sequence[ByteLevel, TemplateProcessing "$A <|endoftext|>"]
# The gpt2 variants replace `"post_processor": null` in the file's text; the C test builds the
# same strings (g_variants in tests/test_tok_post.c) and loads them with tok_load_buffer.
import json
import sys

from tokenizers import Tokenizer

EOT = {"id": "<|endoftext|>", "ids": [50256], "tokens": ["<|endoftext|>"]}
VARIANTS = {
    "gpt2+template": {"type": "TemplateProcessing",
                      "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                 {"Sequence": {"id": "A", "type_id": 0}},
                                 {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                      "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                               {"Sequence": {"id": "B", "type_id": 1}}],
                      "special_tokens": {"<|endoftext|>": EOT}},
    "gpt2+roberta": {"type": "RobertaProcessing", "sep": ["<|endoftext|>", 50256],
                     "cls": ["<|endoftext|>", 50256], "trim_offsets": True,
                     "add_prefix_space": False},
    "gpt2+seq": {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|endoftext|>": EOT}}]},
}

TEXTS = ["The quick brown fox jumps over the lazy dog.", "", " ", "Hello", "  leading spaces",
         "line one\nline two\n", "Call me Ishmael. Some years ago—never mind how long precisely",
         "日本語のテキスト", "x = f(a, b) * 3.14159;", "<|endoftext|> inside text",
         "<|begin_of_text|>already a BOS"]


def main():
    out = []
    with open("assets/tokenizers/gpt2/tokenizer.json", encoding="utf-8") as f:
        gpt2_text = f.read()
    assert gpt2_text.count('"post_processor": null') == 1
    toks = {"llama3": Tokenizer.from_file("assets/tokenizers/llama3/tokenizer.json"),
            "gpt2": Tokenizer.from_str(gpt2_text)}
    for name, pp in VARIANTS.items():
        # the C test inserts json.dumps(pp) with default separators; keep them identical
        toks[name] = Tokenizer.from_str(
            gpt2_text.replace('"post_processor": null', '"post_processor": ' + json.dumps(pp)))
    for name, tok in toks.items():
        for text in TEXTS:
            out.append({"tok": name, "text": text, "with": tok.encode(text).ids,
                        "without": tok.encode(text, add_special_tokens=False).ids})
    with open("tests/data/tok/post_processor_goldens.jsonl", "w", encoding="utf-8") as f:
        for o in out:
            f.write(json.dumps(o, ensure_ascii=False) + "\n")
    for name in VARIANTS:
        print(name, json.dumps(VARIANTS[name]))
    print(f"{len(out)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
