#!/usr/bin/env python3
# make_indexed_fixture.py - writes tests/data/indexed/*.{bin,idx}: tiny Megatron indexed datasets.
#
# A from-scratch reimplementation of the byte format written by Megatron-LM's
# IndexedDatasetBuilder (megatron/core/datasets/indexed_dataset.py, _IndexWriter.write):
# magic b"MMIDIDX\x00\x00", <Q version 1, <B dtype code, <Q sequence count, <Q document count,
# int32 lengths, int64 byte pointers (prefix sums of length*itemsize), int64 document indices
# ([0] + running sequence count after each document). Only the standard library is used.
#
# Also writes the Primus variant (AMD-AGI/Primus tools/hybrid/convert_fla_to_megatron.py):
# every chunk one sequence and one document, document indices 1..N without the leading 0.
# Usage: python3 tools/reference/make_indexed_fixture.py [outdir]
import os
import struct
import sys

CODES = {"uint16": (8, "H"), "int32": (4, "i")}


def write(prefix, dtype, documents, primus=False):
    """documents: list of documents, each a list of sequences (lists of token ids)."""
    code, fmt = CODES[dtype]
    itemsize = struct.calcsize("<" + fmt)
    lengths, doc_idx = [], [0]
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            for seq in doc:
                f.write(struct.pack("<%d%s" % (len(seq), fmt), *seq))
                lengths.append(len(seq))
            doc_idx.append(len(lengths))
    if primus:
        doc_idx = list(range(1, len(lengths) + 1))
    pointers, off = [], 0
    for n in lengths:
        pointers.append(off)
        off += n * itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(struct.pack("<%di" % len(lengths), *lengths))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_idx), *doc_idx))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/indexed"
    os.makedirs(out, exist_ok=True)
    # Three documents; the first has two sequences (as with --split-sentences).
    write(os.path.join(out, "std_u16"), "uint16", [[[5, 6, 7], [8]], [[65535]], [[0, 1]]])
    write(os.path.join(out, "std_i32"), "int32",
          [[[128000, 9906, 1917, 128001]], [[128000, 42, 128001]]])
    # Primus: three 4-token chunks, one sequence and one document each, doc index [1, 2, 3].
    write(os.path.join(out, "primus"), "int32",
          [[[1, 2, 3, 4]], [[5, 6, 7, 8]], [[9, 10, 11, 128255]]], primus=True)


if __name__ == "__main__":
    main()
