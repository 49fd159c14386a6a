#!/usr/bin/env python3
# make_parquet_fixtures.py - writes tests/data/parquet/*.parquet with pyarrow, plus for each
# file NAME.expected.jsonl: one line per row, the "text" value as a JSON string or null.
#
# Covers what src/data/parquet.c must read: codecs snappy / zstd / gzip / none, data page v1
# and v2, dictionary (RLE_DICTIONARY) and PLAIN values, dictionary fallback to PLAIN inside one
# column chunk, several row groups and several pages per chunk, optional columns with nulls, a
# required column, and extra non-text columns around the text column.
# Usage: python3 -m venv /tmp/v && /tmp/v/bin/pip install pyarrow
#        /tmp/v/bin/python tools/reference/make_parquet_fixtures.py [outdir]
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def texts(n, seed, nulls=False, repeat=False):
    out = []
    for i in range(n):
        if nulls and i % 7 == 3:
            out.append(None)
        elif i % 11 == 5:
            out.append("")
        elif repeat:
            out.append(["alpha", "beta béta", "γάμμα", "delta\nline two"][(i * seed) % 4])
        else:
            out.append("doc %d seed %d: %s" % (i, seed, "xyz é 日本 " * ((i * seed) % 9)))
    return out


def write(outdir, name, table, **kw):
    path = os.path.join(outdir, name + ".parquet")
    pq.write_table(table, path, **kw)
    with open(os.path.join(outdir, name + ".expected.jsonl"), "w", encoding="utf-8") as f:
        for v in table.column("text").to_pylist():
            f.write(json.dumps(v, ensure_ascii=False) + "\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/parquet"
    os.makedirs(out, exist_ok=True)
    # snappy, dictionary, v1 pages, 3 row groups, nulls, an id column before the text.
    t = texts(10, 3, nulls=True, repeat=True)
    write(out, "snappy_dict_groups",
          pa.table({"id": pa.array(range(10), pa.int64()), "text": pa.array(t, pa.string())}),
          compression="snappy", row_group_size=4, data_page_version="1.0")
    # zstd, PLAIN, v2 pages, nulls, text between two other columns.
    t = texts(9, 5, nulls=True)
    write(out, "zstd_plain_v2",
          pa.table({"url": pa.array(["u%d" % i for i in range(9)]), "text": pa.array(t, pa.string()),
                    "score": pa.array([i * 0.5 for i in range(9)], pa.float64())}),
          compression="zstd", use_dictionary=False, data_page_version="2.0")
    # uncompressed, dictionary, v2 pages, nulls.
    t = texts(8, 7, nulls=True, repeat=True)
    write(out, "none_dict_v2", pa.table({"text": pa.array(t, pa.string())}),
          compression="none", data_page_version="2.0")
    # gzip, required (non-nullable) column, v1, PLAIN.
    t = texts(6, 2)
    schema = pa.schema([pa.field("meta", pa.int32()), pa.field("text", pa.string(), nullable=False)])
    write(out, "gzip_required",
          pa.table({"meta": pa.array(range(6), pa.int32()), "text": pa.array(t, pa.string())},
                   schema=schema),
          compression="gzip", use_dictionary=False, data_page_version="1.0")
    # Many small pages per chunk, dictionary that overflows into PLAIN pages (fallback), two row
    # groups, dictionary indices wider than one bit.
    t = ["w%d %s" % (i % 300, "pad" * (i % 5)) if i % 13 else None for i in range(1200)]
    write(out, "snappy_many_pages",
          pa.table({"text": pa.array(t, pa.string())}), compression="snappy",
          row_group_size=700, data_page_size=512, dictionary_pagesize_limit=1024,
          write_batch_size=64, data_page_version="1.0")


if __name__ == "__main__":
    main()
