#!/usr/bin/env python3
"""prof_diff.py - two `kda train --profile` tables (core/prof.c's Markdown) side by side.

Usage: prof_diff.py A.md B.md
Prints one Markdown table: op, ms in A, ms in B, B - A, and calls in each, for every row of
either table (the step row last), so a switch's before/after reads in one place
(bench/train_throughput/device_perf.sh prints CMP vs the defaults with it). Rows are matched by
the op name; a row missing on one side shows "-".
"""
import sys


def read_table(path):
    """op name -> (calls, ms) from the profile table in path, in file order."""
    rows = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 3 or cells[0] in ("op", "") or cells[0].startswith("---"):
                continue
            name = cells[0].replace("**", "")
            try:
                ms = float(cells[2].replace("**", ""))
            except ValueError:
                continue
            rows[name] = (cells[1], ms)
    return rows


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: prof_diff.py A.md B.md\n")
        return 2
    a, b = read_table(argv[1]), read_table(argv[2])
    names = list(a) + [n for n in b if n not in a]
    names.sort(key=lambda n: n.startswith("step"))  # the step row last, order kept otherwise
    print("| op | A ms | B ms | B - A | calls A | calls B |")
    print("|---|---:|---:|---:|---:|---:|")
    for n in names:
        ca, ma = a.get(n, ("-", None))
        cb, mb = b.get(n, ("-", None))
        fa = "-" if ma is None else "%.3f" % ma
        fb = "-" if mb is None else "%.3f" % mb
        d = "-" if ma is None or mb is None else "%+.3f" % (mb - ma)
        print("| %s | %s | %s | %s | %s | %s |" % (n, fa, fb, d, ca, cb))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
