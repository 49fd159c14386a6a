#!/usr/bin/env python3
# tokenizer_reference.py - reference token ids from HF `tokenizers` for tests/test_tok.c, and the
# GPT-2 tokenizer.json built from OpenAI's encoder.json + vocab.bpe.
#
#   python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
#   /tmp/tokvenv/bin/python tools/reference/tokenizer_reference.py            (from the repo root)
#
# Writes:
#   assets/tokenizers/gpt2/tokenizer.json, tokenizer_config.json   (conversion, --gpt2-only too)
#   tests/data/tok/<tok>_cases_<mode>.hash   one line per case of testcases.jsonl then
#        extra_cases.jsonl: "<n_ids> <fnv1a64 hex>"; mode "plain" = special tokens in the text are
#        ordinary text (HF encode_special_tokens=True), "specials" = HF's default splitting;
#        mode "pieces" = the pre-tokenizer alone, hashing the byte offsets where pieces end
#   tests/data/tok/<tok>_<text>.hash        whole file encoded as one string (no BOS/EOS):
#        first line "<n_ids> <block>", then one fnv1a64 hex per block of <block> ids
# <tok> is llama3 or gpt2, <text> moby_dick or web_bible. fnv1a64 runs over the ids as
# little-endian uint32 bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
import argparse
import json
import os
import sys

BLOCK = 256
TOKS = {"llama3": "assets/tokenizers/llama3/tokenizer.json",
        "gpt2": "assets/tokenizers/gpt2/tokenizer.json"}
TEXTS = ["moby_dick", "web_bible"]


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def build_gpt2(root):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    d = os.path.join(root, "assets/tokenizers/gpt2")
    bpe = models.BPE.from_file(os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe"))
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tk.save(os.path.join(d, "tokenizer.json"))
    cfg = {"tokenizer_class": "GPT2TokenizerFast", "bos_token": "<|endoftext|>",
           "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "model_max_length": 1024,
           "add_prefix_space": False}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def load_cases(root):
    texts = []
    for name in ["testcases.jsonl", "extra_cases.jsonl"]:
        with open(os.path.join(root, "tests/data/tok", name), encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f if line.strip()]
    return texts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=".")
    ap.add_argument("--gpt2-only", action="store_true")
    a = ap.parse_args()
    from tokenizers import Tokenizer, __version__
    build_gpt2(a.root)
    if a.gpt2_only:
        return
    out = os.path.join(a.root, "tests/data/tok")
    cases = load_cases(a.root)
    for name, path in TOKS.items():
        tk = Tokenizer.from_file(os.path.join(a.root, path))
        for mode, enc_special in [("plain", True), ("specials", False)]:
            tk.encode_special_tokens = enc_special
            encs = tk.encode_batch(cases, add_special_tokens=False)
            with open(os.path.join(out, "%s_cases_%s.hash" % (name, mode)), "w") as f:
                for e in encs:
                    f.write("%d %016x\n" % (len(e.ids), fnv1a64(e.ids)))
        with open(os.path.join(out, "%s_cases_pieces.hash" % name), "w") as f:
            for text in cases:  # pre-tokenizer alone: byte offsets where pieces end
                cum, ends = [0], []
                for ch in text:
                    cum.append(cum[-1] + len(ch.encode("utf-8")))
                for _, (lo, hi) in tk.pre_tokenizer.pre_tokenize_str(text):
                    ends.append(cum[hi])
                f.write("%d %016x\n" % (len(ends), fnv1a64(ends)))
        tk.encode_special_tokens = True
        for text in TEXTS:
            with open(os.path.join(a.root, "assets/text/%s.txt" % text), encoding="utf-8") as f:
                ids = tk.encode(f.read(), add_special_tokens=False).ids
            with open(os.path.join(out, "%s_%s.hash" % (name, text)), "w") as f:
                f.write("%d %d\n" % (len(ids), BLOCK))
                for i in range(0, len(ids), BLOCK):
                    f.write("%016x\n" % fnv1a64(ids[i:i + BLOCK]))
            print("%s %s: %d ids (tokenizers %s)" % (name, text, len(ids), __version__),
                  file=sys.stderr)


if __name__ == "__main__":
    main()
