#!/usr/bin/env python3
"""gpt_dataset_reference.py - numpy reimplementation of Megatron's GPTDataset index builder.

Written from data-formats.md §2 and a reading of NVIDIA/Megatron-LM
megatron/core/datasets/{gpt_dataset.py, helpers.cpp, blended_megatron_dataset_builder.py,
utils.py}. It produces the golden files under tests/data/gpt_dataset/ that tests/test_gpt_dataset.c
compares src/train/{mt19937,gpt_dataset}.c against:

  mt19937.txt         raw MT19937 outputs, 64-bit draws and shuffles of numpy's legacy
                      RandomState (the real numpy generator, not a reimplementation)
  gpt_<case>.txt      document/sample/shuffle indices and the first samples' tokens
  split.txt           split-string bounds (Megatron's _get_split_indices rounding)
  blend.txt           Megatron's build_blending_indices

File format: one array per line, "name v0 v1 ...", integers in decimal; lines starting with
'#' are comments. Usage: python3 tools/reference/gpt_dataset_reference.py [outdir]
(needs numpy; tested with numpy 2.4).
"""
import math
import os
import re
import sys

import numpy as np


def write(f, name, values):
    f.write(name + " " + " ".join(str(int(v)) for v in np.asarray(values).reshape(-1)) + "\n")


# ---- Megatron GPTDataset ---------------------------------------------------------------------

def num_epochs(tokens_per_epoch, seq_length, num_samples):
    epochs, tokens = 1, tokens_per_epoch
    if num_samples <= 0:
        return 1
    requested = num_samples * seq_length + 1  # add_extra_token_to_sequence = 1
    while tokens < requested:
        epochs += 1
        tokens += tokens_per_epoch
    return epochs


def document_index(ids, epochs, rs, separate_last):
    if not separate_last or epochs == 1:
        d = np.mgrid[0:epochs, 0:len(ids)][1]
        d[:] = ids
        d = d.reshape(-1).astype(np.int32)
        rs.shuffle(d)
        return d
    first = document_index(ids, epochs - 1, rs, False)
    last = document_index(ids, 1, rs, False)
    return np.concatenate((first, last))


def sample_index(sizes, doc_idx, seq_length, epochs, tokens_per_epoch):
    n = (epochs * tokens_per_epoch - 1) // seq_length
    out = np.zeros((n + 1, 2), dtype=np.int64)
    pos, off = 0, 0
    for s in range(1, n + 1):
        remaining = seq_length + 1
        while remaining != 0:
            length = int(sizes[doc_idx[pos]]) - off
            remaining -= length
            if remaining <= 0:
                off += remaining + length - 1
                remaining = 0
            else:
                assert pos != len(doc_idx) - 1
                pos += 1
                off = 0
        out[s] = (pos, off)
    return out


def shuffle_index(num_samples, total, rs):
    dtype = np.uint32 if total < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(0, num_samples, dtype=dtype)
    rs.shuffle(first)
    if num_samples == total:
        return first
    last = np.arange(num_samples, total, dtype=dtype)
    rs.shuffle(last)
    return np.concatenate((first, last))


def build(sizes, first, count, seq_length, num_samples, seed):
    ids = np.arange(first, first + count, dtype=np.int32)
    tpe = int(np.sum(sizes[ids]))
    epochs = num_epochs(tpe, seq_length, num_samples)
    separate = False
    before = 0
    if epochs > 1 and num_samples > 0:
        before = ((epochs - 1) * tpe - 1) // seq_length
        from_last = num_samples - before
        per_epoch = (tpe - 1) // seq_length
        assert 0 <= from_last <= per_epoch + 1
        separate = from_last < int(0.80 * per_epoch)
    rs = np.random.RandomState(seed)
    doc = document_index(ids, epochs, rs, separate)
    smp = sample_index(sizes, doc, seq_length, epochs, tpe)
    n = smp.shape[0] - 1
    shf = shuffle_index(before if separate else n, n, rs)
    return epochs, separate, doc, smp, shf


def read_sample(tokens_of, doc, smp, shf, i):
    j = int(shf[i])
    (pb, ob), (pe, oe) = smp[j], smp[j + 1]
    if pb == pe:
        return tokens_of(doc[pb])[ob:oe + 1]
    parts = []
    for p in range(pb, pe + 1):
        t = tokens_of(doc[p])
        lo = ob if p == pb else 0
        hi = oe + 1 if p == pe else len(t)
        parts.append(t[lo:hi])
    return np.concatenate(parts)


def gpt_case(outdir, name, sizes, first, count, seq_length, num_samples, seed, n_read=6):
    sizes = np.asarray(sizes, dtype=np.int32)
    epochs, separate, doc, smp, shf = build(sizes, first, count, seq_length, num_samples, seed)

    def tokens_of(s):  # synthetic token stream: id = 1000 * sequence + offset
        return np.arange(sizes[s], dtype=np.int64) + 1000 * int(s)

    with open(os.path.join(outdir, f"gpt_{name}.txt"), "w") as f:
        f.write(f"# {name}: epochs {epochs}, separate_last_epoch {int(separate)}\n")
        write(f, "lengths", sizes)
        write(f, "params", [first, count, seq_length, num_samples, seed])
        write(f, "epochs_separate", [epochs, int(separate)])
        write(f, "document_index", doc)
        write(f, "sample_index", smp)
        write(f, "shuffle_index", shf)
        for i in range(min(n_read, len(shf))):
            write(f, f"sample_{i}", read_sample(tokens_of, doc, smp, shf, i))
    return epochs, separate


# ---- splits and blends -----------------------------------------------------------------------

def parse_split(s):
    v = [float(x) for x in re.findall(r"[.0-9]+", s)]
    v += [0.0] * (3 - len(v))
    total = np.sum(np.array(v, dtype=np.float64))
    return (np.array(v, dtype=np.float64) / total).tolist()


def split_bounds(split, n):
    b = [0]
    for pct in split:
        b.append(b[-1] + int(round(pct * float(n))))
    b[1:] = [x - (b[-1] - n) for x in b[1:]]
    return b


def blending(weights, size):
    w = np.array(weights, dtype=np.float64)
    w = w / np.sum(w)
    taken = [0] * len(w)
    di, dsi = [], []
    for s in range(size):
        sd = max(float(s), 1.0)
        best, best_err = 0, w[0] * sd - taken[0]
        for d in range(1, len(w)):
            e = w[d] * sd - taken[d]
            if e > best_err:
                best, best_err = d, e
        di.append(best)
        dsi.append(taken[best])
        taken[best] += 1
    return di, dsi


# ---- main ------------------------------------------------------------------------------------

def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/gpt_dataset"
    os.makedirs(outdir, exist_ok=True)

    with open(os.path.join(outdir, "mt19937.txt"), "w") as f:
        f.write(f"# numpy {np.__version__} legacy RandomState\n")
        for seed in (42, 0, 1234, 4294967295):
            rs = np.random.RandomState(seed)
            n = 700 if seed == 42 else 8  # 700 crosses one regeneration of the 624-word state
            write(f, f"next32_{seed}", rs.randint(0, 2**32, size=n, dtype=np.uint64))
        rs = np.random.RandomState(42)
        write(f, "next64masked_42", rs.randint(0, 2**40, size=8, dtype=np.uint64))
        for seed, n in ((42, 1), (42, 2), (42, 5), (42, 100), (7, 1000), (3, 65537)):
            x = np.arange(n, dtype=np.int64)
            np.random.RandomState(seed).shuffle(x)
            write(f, f"shuffle_{seed}_{n}", x[:2000])

    rng = np.random.RandomState(2024)
    lens50 = rng.randint(1, 40, size=50)
    print(gpt_case(outdir, "one_epoch", lens50, 0, 50, 16, 30, 42))
    # tokens_per_epoch = sum(lens); 3 epochs, few samples from the last -> separate
    tpe = int(np.sum(lens50))
    per_epoch = (tpe - 1) // 16
    before = (2 * tpe - 1) // 16
    print(gpt_case(outdir, "three_epochs_separate", lens50, 0, 50, 16, before + 3, 42))
    print(gpt_case(outdir, "three_epochs_joint", lens50, 0, 50, 16, before + int(0.9 * per_epoch), 42))
    # a split in the middle, zero-length sequences, long sequences spanning many samples
    lens_mixed = rng.randint(0, 90, size=40)
    lens_mixed[[3, 4, 17]] = 0
    print(gpt_case(outdir, "split_zero_len", lens_mixed, 5, 30, 8, 0, 1234))
    print(gpt_case(outdir, "chunks", np.full(12, 32), 0, 12, 32, 30, 42))

    with open(os.path.join(outdir, "split.txt"), "w") as f:
        for s, n in (("969,30,1", 1000), ("969,30,1", 12345), ("98,2,0", 101), ("1", 7),
                     ("949,50,1", 1234567), ("1,1,1", 10), ("90/5/5", 2)):
            sp = parse_split(s)
            f.write(f"# {s} n={n}\n")
            write(f, f"split {n}", split_bounds(sp, n))
            f.write(f"str {s}\n")

    with open(os.path.join(outdir, "blend.txt"), "w") as f:
        for k, (w, size) in enumerate((([0.3, 0.7], 50), ([1, 2, 3], 40), ([0.5, 0.25, 0.25], 17))):
            di, dsi = blending(w, size)
            f.write("weights " + " ".join(repr(float(x)) for x in w) + "\n")
            write(f, f"blend_{k}_size", [size])
            write(f, f"blend_{k}_dataset", di)
            write(f, f"blend_{k}_sample", dsi)


if __name__ == "__main__":
    main()
