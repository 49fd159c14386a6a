#!/usr/bin/env python3
# bench.py - tokenizer throughput: kda (bench_tok.c) vs tiktoken vs HF tokenizers, same texts,
# same tokenizers, one thread and all threads. Prints a Markdown table (MB/s = 1e6 bytes/s).
#
#   python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tiktoken tokenizers
#   make BUILD=build KDA_CUDA=0      # builds build/libkda.a
#   /tmp/tokvenv/bin/python bench/tokenizer/bench.py [--build build] [--repeats 3]
#
# One thread: the whole file encoded as one string (tiktoken encode_ordinary, HF encode; kda
# tok_encode), best of --repeats. All threads: the file cut at blank lines into ~64 KB chunks,
# encoded with tiktoken encode_ordinary_batch(num_threads=N), HF encode_batch (rayon, N threads)
# and kda with OpenMP over the chunks. Special-token parsing is off everywhere.
import argparse
import base64
import json
import os
import subprocess
import time

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_decoder():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def tiktoken_enc(name):
    import tiktoken
    if name == "llama3":
        ranks = {}
        with open("assets/tokenizers/llama3/tokenizer.model") as f:
            for line in f:
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
        return tiktoken.Encoding("llama3", pat_str=LLAMA3_PAT, mergeable_ranks=ranks,
                                 special_tokens={"<|begin_of_text|>": 128000})
    dec = byte_decoder()
    with open("assets/tokenizers/gpt2/encoder.json") as f:
        enc = json.load(f)
    ranks = {bytes(dec[c] for c in tok): i for tok, i in enc.items() if tok != "<|endoftext|>"}
    return tiktoken.Encoding("gpt2", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


def chunks_of(text, target=65536):
    out, start = [], 0
    while start < len(text):
        end = min(start + target, len(text))
        p = text.find("\n\n", end) if end < len(text) else -1
        end = p + 2 if p >= 0 else len(text)
        out.append(text[start:end])
        start = end
    return out


def best_time(fn, reps):
    best, res = 1e30, None
    for _ in range(reps):
        t0 = time.perf_counter()
        res = fn()
        best = min(best, time.perf_counter() - t0)
    return best, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--texts", default="moby_dick,web_bible")
    a = ap.parse_args()
    from tokenizers import Tokenizer
    nthreads = os.cpu_count()
    exe = os.path.join(a.build, "bench_tok")
    subprocess.run(["cc", "-std=c11", "-O2", "-fopenmp", "-D_GNU_SOURCE", "-Isrc", "-o", exe,
                    "bench/tokenizer/bench_tok.c", os.path.join(a.build, "libkda.a"), "-lzstd",
                    "-lz", "-lm", "-lpthread"], check=True)
    rows = []
    for name, path in [("llama3", "assets/tokenizers/llama3/tokenizer.json"),
                       ("gpt2", "assets/tokenizers/gpt2/tokenizer.json")]:
        tt = tiktoken_enc(name)
        hf = Tokenizer.from_file(path)
        for tname in a.texts.split(","):
            fpath = "assets/text/%s.txt" % tname
            with open(fpath, encoding="utf-8") as f:
                text = f.read()
            nbytes = len(text.encode("utf-8"))
            chunks = chunks_of(text)
            out = subprocess.run([exe, path, fpath, str(a.repeats)], check=True,
                                 capture_output=True, text=True).stdout
            for line in out.splitlines():
                r = json.loads(line)
                rows.append((name, tname, "kda", r["threads"], nbytes, r["tokens"], r["seconds"]))
            s, ids = best_time(lambda: tt.encode_ordinary(text), a.repeats)
            rows.append((name, tname, "tiktoken", 1, nbytes, len(ids), s))
            s, res = best_time(lambda: tt.encode_ordinary_batch(chunks, num_threads=nthreads),
                               a.repeats)
            rows.append((name, tname, "tiktoken", nthreads, nbytes, sum(map(len, res)), s))
            s, enc = best_time(lambda: hf.encode(text, add_special_tokens=False), a.repeats)
            rows.append((name, tname, "hf-tokenizers", 1, nbytes, len(enc.ids), s))
            s, res = best_time(lambda: hf.encode_batch(chunks, add_special_tokens=False), a.repeats)
            rows.append((name, tname, "hf-tokenizers", nthreads, nbytes,
                         sum(len(e.ids) for e in res), s))
    print("| tokenizer | text | impl | threads | tokens | MB/s | Mtokens/s |")
    print("|---|---|---|---|---|---|---|")
    for name, tname, impl, th, nb, nt, s in rows:
        print("| %s | %s | %s | %d | %d | %.1f | %.2f |" % (name, tname, impl, th, nt, nb / s / 1e6,
                                                             nt / s / 1e6))


if __name__ == "__main__":
    main()
