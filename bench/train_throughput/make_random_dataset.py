#!/usr/bin/env python3
# make_random_dataset.py - a synthetic Megatron indexed dataset (PREFIX.bin / PREFIX.idx) of
# uniformly random token ids, for throughput benchmarks only (the loss cannot fall on it).
#
#   python3 bench/train_throughput/make_random_dataset.py PREFIX [--sequences N] [--length L]
#           [--vocab V] [--seed S]
#
# Layout (docs: data-formats.md §1.2): one document per sequence, N sequences of L int32 ids in
# [0, V) (dtype code 4, as Megatron uses for vocabularies above 65500); .idx = magic, version 1,
# dtype code, N, N + 1, int32 lengths, int64 byte pointers, int64 document indices 0..N.
# Default L = 2049: one Megatron sample (seq_length + 1 tokens) per sequence at seq 2048.
# Writes to temporary names and renames, so a crash never leaves a valid-looking pair.
import argparse
import os
import struct
import sys

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"


def write_dataset(prefix, n_seq, length, vocab, seed):
    """Writes PREFIX.bin/.idx; returns the number of tokens."""
    if n_seq < 1 or length < 1 or not 1 <= vocab <= 2**31 - 1:
        raise ValueError(f"need sequences >= 1, length >= 1, 1 <= vocab < 2^31 "
                         f"(got {n_seq}, {length}, {vocab})")
    d = os.path.dirname(prefix)
    if d:
        os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    tmp_bin, tmp_idx = prefix + ".bin.tmp", prefix + ".idx.tmp"
    with open(tmp_bin, "wb") as f:
        left = n_seq
        while left:  # blocks of at most ~16M ids keep memory small
            m = min(left, max(1, (1 << 24) // length))
            rng.integers(0, vocab, size=m * length, dtype=np.int32).tofile(f)
            left -= m
    lengths = np.full(n_seq, length, dtype=np.int32)
    pointers = np.arange(n_seq, dtype=np.int64) * (length * 4)
    docs = np.arange(n_seq + 1, dtype=np.int64)
    with open(tmp_idx, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<QBQQ", 1, 4, n_seq, n_seq + 1))
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(docs.astype("<i8").tobytes())
    os.replace(tmp_bin, prefix + ".bin")
    os.replace(tmp_idx, prefix + ".idx")
    return n_seq * length


def main():
    ap = argparse.ArgumentParser(description="synthetic Megatron .bin/.idx of random int32 ids")
    ap.add_argument("prefix", help="output prefix: writes PREFIX.bin and PREFIX.idx")
    ap.add_argument("--sequences", type=int, default=2048, help="number of sequences (documents)")
    ap.add_argument("--length", type=int, default=2049, help="ids per sequence")
    ap.add_argument("--vocab", type=int, default=128256, help="ids are drawn from [0, vocab)")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    try:
        n = write_dataset(a.prefix, a.sequences, a.length, a.vocab, a.seed)
    except (ValueError, OSError) as e:
        sys.exit(f"make_random_dataset: {e}")
    print(f"wrote {a.prefix}.bin/.idx: {a.sequences} sequences x {a.length} = {n} int32 ids "
          f"< {a.vocab}", file=sys.stderr)


if __name__ == "__main__":
    main()
