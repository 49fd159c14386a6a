#!/usr/bin/env python3
"""spread.py - the noise floor of the parity benchmark: how far apart the final models of runs
that differ only in rounding land, from several runs' parity.json (bench/parity/run.sh).

Each run of run.sh trains one kda.c model and one FLA model from the same init on the same chunks
with the same learning rates, and FLA scores both on the same unseen chunks (parity.json:
cross.kda_final.fla, cross.fla_final.fla). FLA's scoring is the fixed ruler here: kda.c's own
scoring follows the run's switches (KDA_CORE=simt scores with the SIMT core, ~1e-4 apart). Two runs that change only the rounding of one side
(KDA_CORE=simt vs the tensor-core core; FLA_ONE_CONFIG=1 vs 0, other Triton configs) give two
models of that side; the distance between them is what chaos alone does to a final model in
300 bf16 iterations. The bar on the distance between kda.c's and FLA's final models
(bench/parity/README.md) means something only above that spread.

Usage:
    python3 bench/parity/spread.py LABEL=parity.json LABEL=parity.json ...
        a Markdown table: every final model's held-out score (FLA's scoring), the distance of
        every pair of models of the same side, the widest such distance (the noise floor) and,
        per run, the kda.c-vs-FLA distance the bar checks.
    python3 bench/parity/spread.py --self-test     # synthetic runs; exits non-zero on a mismatch

Labels name the variant (e.g. tc=out_tc/parity.json simt=out_simt/parity.json). A side's model is
the same model in two runs when its score is bit-identical (e.g. FLA's, when only kda.c changed):
such pairs are listed as identical and not counted in the spread.
"""

import itertools
import json
import sys


def load(arg):
    """LABEL=path -> (label, run dict); exits with one line on a bad argument or file."""
    if "=" not in arg:
        sys.exit(f"spread.py: {arg}: expected LABEL=path/to/parity.json")
    label, path = arg.split("=", 1)
    try:
        with open(path) as f:
            run = json.load(f)
        cross = run["cross"]
        scores = {"kda.c": float(cross["kda_final"]["fla"]), "FLA": float(cross["fla_final"]["fla"])}
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"spread.py: {path}: not a parity.json with cross.kda_final.fla and "
                 f"cross.fla_final.fla ({e})")
    return label, scores


def spread(runs):
    """runs: [(label, {"kda.c": score, "FLA": score})] -> (pairs, widest, per_run).
    pairs: (side, label a, label b, |Δ|, identical); widest: the largest |Δ| of non-identical
    pairs (None when there is none); per_run: (label, |kda.c - FLA|)."""
    pairs = []
    for side in ("kda.c", "FLA"):
        for (la, sa), (lb, sb) in itertools.combinations(runs, 2):
            d = abs(sa[side] - sb[side])
            pairs.append((side, la, lb, d, sa[side] == sb[side]))
    moving = [p[3] for p in pairs if not p[4]]
    widest = max(moving) if moving else None
    per_run = [(label, abs(s["kda.c"] - s["FLA"])) for label, s in runs]
    return pairs, widest, per_run


def report(runs):
    pairs, widest, per_run = spread(runs)
    out = ["| run | kda.c final (FLA's score) | FLA final (FLA's score) | kda.c − FLA |",
           "|---|---:|---:|---:|"]
    for label, s in runs:
        out.append(f"| {label} | {s['kda.c']:.5f} | {s['FLA']:.5f} | {s['kda.c'] - s['FLA']:+.2e} |")
    out += ["", "| side | runs | distance between the final models |", "|---|---|---:|"]
    for side, la, lb, d, same in pairs:
        out.append(f"| {side} | {la} vs {lb} | {'identical' if same else f'{d:.2e}'} |")
    out.append("")
    if widest is None:
        out.append("No side changed between the runs: no spread measured.")
    else:
        out.append(f"Noise floor (widest distance between two models of one side): {widest:.2e}; "
                   f"kda.c vs FLA per run: " +
                   ", ".join(f"{label} {d:.2e}" for label, d in per_run) + ".")
    return "\n".join(out)


def self_test():
    runs = [("a", {"kda.c": 7.60, "FLA": 7.61}), ("b", {"kda.c": 7.63, "FLA": 7.61}),
            ("c", {"kda.c": 7.60, "FLA": 7.65})]
    pairs, widest, per_run = spread(runs)
    fails = 0
    want = {("kda.c", "a", "b"): 0.03, ("kda.c", "a", "c"): 0.0, ("FLA", "a", "c"): 0.04}
    for side, la, lb, d, same in pairs:
        w = want.get((side, la, lb))
        if w is not None and abs(d - w) > 1e-12:
            print(f"FAIL {side} {la} {lb}: {d} != {w}")
            fails += 1
    if not any(p[4] for p in pairs if p[0] == "FLA" and p[1] == "a" and p[2] == "b"):
        print("FAIL: FLA a vs b (bit-identical scores) not marked identical")
        fails += 1
    if widest is None or abs(widest - 0.04) > 1e-12:  # FLA a or b vs c: |7.61 - 7.65|
        print(f"FAIL widest {widest}")
        fails += 1
    if [round(d, 12) for _, d in per_run] != [0.01, 0.02, 0.05]:
        print(f"FAIL per run {per_run}")
        fails += 1
    print(f"spread.py self-test: {'ok' if not fails else f'{fails} failed'}")
    return 1 if fails else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 3:
        sys.exit("usage: spread.py LABEL=parity.json LABEL=parity.json ... (at least two runs); "
                 "spread.py --self-test")
    print(report([load(a) for a in argv[1:]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
