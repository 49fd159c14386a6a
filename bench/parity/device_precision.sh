#!/bin/bash
# device_precision.sh - GPU scoring precision (issue 12, item 3) in one call of < 4 minutes on the
# GPU machine: build, the GPU tests `gpu_score_precision_*` (tests/test_gpu_score.c), then the
# FLA-trained model tests/data/fla_trained/tied scored on its 8 held-out windows (T = 2 .. 2048)
# plus 7 prefixes of its 2048-token window (T = 2, 3, 31, 32, 33, 64, 200) by
#   kda score --device cpu | --device cuda --precision fp32 | --device cuda --precision bf16
#   tools/reference/fla_score.py in fp32, bf16 (lm-eval's dtype=bfloat16) and autocast (bf16
#   body, fp32 head: bench/parity's convention)
# and the table of per-sequence |Δ loss| (max, mean over the 15 sequences): GPU fp32 vs CPU
# (bar 1e-4), GPU bf16 vs CPU, GPU bf16 vs FLA bf16 (bar 2e-3 for T >= 64; shorter sequences
# reported without a bar: a few-token mean carries one row's bf16 noise whole, FLA's own bf16 is
# 1.1e-2 from its fp32 at T = 2), plus FLA fp32 vs CPU for context.
#
# Usage (repository root, GPU machine; carry .devdeps and .whl):
#   bash bench/parity/device_precision.sh
# Expected: "gpu_score_precision: 5 passed, 0 failed" (test.log: every |d| of fp32 ~1e-6), then
# the table on stdout and in $OUT/precision.md, PASS/FAIL per bar; exit status 0 when the tests
# and both bars pass. FLA runs in the background while kda.c builds (Triton compiles its kernels
# on first use, FLA_ONE_CONFIG=1); rows whose source did not finish in time say "missing".
#
# Environment: KDA_LIMIT=230 (seconds for the whole script), OUT=/tmp/kda-out.
# $OUT: precision.md, build.log, test.log, fla.log, scores_<source>.jsonl (6 files).
set -u
START=$(date +%s)
LIMIT=${KDA_LIMIT:-230}
left() { echo $((LIMIT - ($(date +%s) - START))); }
OUT=${OUT:-/tmp/kda-out}
W=/tmp/kda_precision
MODEL=tests/data/fla_trained/tied
mkdir -p "$OUT" "$W"
export FLA_ONE_CONFIG=1 TRITON_CACHE_AUTOTUNING=1 PYTHONUNBUFFERED=1
# shellcheck source=bench/train_throughput/gpu_env.sh
source bench/train_throughput/gpu_env.sh

# Inputs: the 8 held-out windows, then prefixes of the 2048-token one (chunk boundaries 16 / 32 /
# 64 of the GPU and CPU cores).
python3 - "$MODEL/scores.jsonl" "$W/inputs.jsonl" << 'PY' || exit 1
import json, sys
rows = [json.loads(l)["ids"] for l in open(sys.argv[1]) if l.strip()]
long = max(rows, key=len)
with open(sys.argv[2], "w") as f:
    for ids in rows + [long[:t] for t in (2, 3, 31, 32, 33, 64, 200)]:
        f.write(json.dumps({"ids": ids}) + "\n")
PY

kda_gpu_env || exit 1
(
    kda_fla_env || exit 1
    # bf16 first: the bar (GPU bf16 vs FLA bf16) needs it, and on 2026-12-03 the fp32 run took
    # most of the time left, so bf16 finished 3 of its 15 sequences
    for p in bf16 fp32 autocast; do # each run ends 12 s before the script's limit at the latest
        t=$(($(left) - 12))
        [ "$t" -gt 5 ] || break
        PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}tools/reference timeout "$t" \
            python3 tools/reference/fla_score.py "$MODEL" "$W/inputs.jsonl" "$p" \
            > "$W/fla_$p.jsonl" 2>> "$OUT/fla.log"
    done
) > /dev/null 2>> "$OUT/fla.log" &
FLA_PID=$!

echo "== build ($(left) s left)"
kda_gpu_build "$OUT/build.log" "$KDA_GPU_BUILD/kda" "$KDA_GPU_BUILD/kda_test" || {
    tail -20 "$OUT/build.log"
    exit 1
}
KDA=$KDA_GPU_BUILD/kda
echo "== gpu_score_precision tests ($(left) s left)"
timeout $(($(left) > 60 ? 60 : $(left))) "$KDA_GPU_BUILD/kda_test" --gpu gpu_score_precision \
    > "$OUT/test.log" 2>&1
TEST_RC=$?
grep -E "passed|FAIL|fp32 vs CPU|bf16 vs CPU|logits" "$OUT/test.log"

echo "== kda score ($(left) s left)"
for p in cpu fp32 bf16; do
    dev="--device cuda --precision $p"
    [ "$p" = cpu ] && dev="--device cpu"
    # shellcheck disable=SC2086
    "$KDA" score --model "$MODEL" --input "$W/inputs.jsonl" $dev > "$W/kda_$p.jsonl" \
        2>> "$OUT/test.log" || echo "kda score $dev failed (test.log)"
done

echo "== waiting for FLA ($(left) s left)"
wait "$FLA_PID" # its runs are bounded by timeout (above)
for s in kda_cpu kda_fp32 kda_bf16 fla_fp32 fla_bf16 fla_autocast; do
    [ -s "$W/$s.jsonl" ] && cp "$W/$s.jsonl" "$OUT/scores_$s.jsonl"
done

python3 - "$W" "$OUT/precision.md" << 'PY'
import json, os, sys
W, md = sys.argv[1], sys.argv[2]
def load(name):
    p = os.path.join(W, name + ".jsonl")
    if not os.path.exists(p):
        return None
    r = [json.loads(l) for l in open(p) if l.strip()]
    return r if len(r) == 15 else None
S = {n: load(n) for n in ("kda_cpu", "kda_fp32", "kda_bf16", "fla_fp32", "fla_bf16",
                          "fla_autocast")}
lines = ["GPU scoring precision: tests/data/fla_trained/tied, 15 sequences (T = 2 .. 2048), "
         "per-sequence |Δ loss| (mean NLL of tokens 2..T)", "",
         "| comparison | max | mean | bar | result |", "|---|---:|---:|---:|---|"]
ok = True
def row(a, b, label, bar, min_t=0, max_t=1 << 30):
    global ok
    if S[a] is None or S[b] is None:
        lines.append(f"| {label} | missing | | {bar or ''} | {'missing' if bar else ''} |")
        ok = ok and not bar
        return
    d = [abs(x["loss"] - y["loss"]) for x, y in zip(S[a], S[b])
         if min_t <= x["tokens"] < max_t]
    res = ""
    if bar:
        res = "PASS" if max(d) <= bar else "FAIL"
        ok = ok and res == "PASS"
    lines.append(f"| {label} | {max(d):.3g} | {sum(d) / len(d):.3g} | {bar or ''} | {res} |")
row("kda_fp32", "kda_cpu", "kda GPU fp32 vs kda CPU", 1e-4)
row("kda_bf16", "kda_cpu", "kda GPU bf16 vs kda CPU", None)
# The 2e-3 bar holds from T = 64 on (10 of the 15 sequences), as in gpu_score_precision: a mean
# over a few tokens carries the bf16 GEMM noise of one logit row whole, on both sides (measured
# 2026-12-03: FLA's own bf16 vs its fp32 is 1.1e-2 at T = 2, kda.c's bf16 vs CPU 3.4e-3), so
# below T = 64 the rows are reported without a bar.
row("kda_bf16", "fla_bf16", "kda GPU bf16 vs FLA bf16 (dtype=bfloat16), T >= 64", 2e-3, 64)
row("kda_bf16", "fla_bf16", "kda GPU bf16 vs FLA bf16 (dtype=bfloat16), T < 64", None, 0, 64)
row("kda_bf16", "fla_autocast", "kda GPU bf16 vs FLA autocast (bf16 body, fp32 head)", None)
row("fla_bf16", "fla_fp32", "FLA bf16 vs FLA fp32", None)
row("fla_fp32", "kda_cpu", "FLA fp32 vs kda CPU", None)
lines += ["", "| T | kda CPU | GPU fp32 | GPU bf16 | FLA fp32 | FLA bf16 | FLA autocast |",
          "|---:|---:|---:|---:|---:|---:|---:|"]
cpu = S["kda_cpu"] or []
for i, c in enumerate(cpu):
    cells = [f"{S[n][i]['loss']:.7f}" if S[n] else "-" for n in S]
    lines.append(f"| {c['tokens']} | " + " | ".join(cells) + " |")
lines += ["", "bars: " + ("PASS" if ok else "FAIL")]
open(md, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if ok else 1)
PY
TABLE_RC=$?
echo "== done in $(($(date +%s) - START)) s: tests rc $TEST_RC, bars rc $TABLE_RC"
[ "$TEST_RC" -eq 0 ] && [ "$TABLE_RC" -eq 0 ]
