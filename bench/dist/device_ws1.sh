#!/bin/bash
# device_ws1.sh - the NCCL data-parallel path at world size 1 on one GPU (the code path of 8
# ranks: rendezvous, NCCL communicator, per-layer gradient all-reduce on its own stream during the
# last micro-batch's backward, the loss/stop all-reduce) against the plain single-GPU path:
# `kda train` on KDA-300M, micro-batch 16, seq 2048, 13 iterations each, then the GPU test of the
# communicator. Prints a table: median ms/iteration over iterations 4-13, tokens/s, and whether
# the two runs' losses agree (they must be bit-identical: one rank's all-reduce is a copy).
#
# Usage (repository root, on the GPU machine; carry .devdeps):
#   bash bench/dist/device_ws1.sh
# Environment: OUT (default /tmp/kda-out) receives dist_ws1.md and the logs; MB=16 STEPS=13.
set -u
OUT=${OUT:-/tmp/kda-out}
MB=${MB:-16}
STEPS=${STEPS:-13}
W=/tmp/kda_dist

# shellcheck source=bench/dist/dist_env.sh
source bench/dist/dist_env.sh
dist_setup "$OUT/dist_build.log" kda kda_test || exit 1

dist_random_data "$W/random" $((MB * STEPS + 64)) 2049 128256

run() { # NAME EXTRA-ARGS...
    local name=$1
    shift
    timeout 200 "$KDA" train --config $HERE/bench_300M.yaml --micro_batch_size "$MB" \
        --global_batch_size "$MB" --train_iters "$STEPS" --train_data_path "$W/random" \
        --no-progress "$@" > "$OUT/dist_$name.log" 2>&1
    echo "$name: rc=$? ($(grep -c 'iteration ' "$OUT/dist_$name.log") log lines)"
}
run single
run nccl_ws1 --nproc-per-node 1
NCCL_DEBUG=WARN timeout 120 "$KDA_GPU_BUILD/kda_test" gpu_dist > "$OUT/dist_gpu_test.log" 2>&1
echo "gpu_dist tests: $(tail -1 "$OUT/dist_gpu_test.log")"

python3 - "$OUT" <<'EOF' | tee "$OUT/dist_ws1.md"
import re, statistics, sys
out = sys.argv[1]
rows = {}
for name in ("single", "nccl_ws1"):
    ms, loss, tok = [], [], []
    for line in open(f"{out}/dist_{name}.log", errors="replace"):
        m = re.search(r"iteration +(\d+)/.*elapsed time per iteration \(ms\): ([\d.]+).*lm loss: ([\dE.+-]+)"
                      r".*tokens/s/GPU: ([\d.]+)", line)
        if m:
            it = int(m.group(1))
            loss.append(m.group(3))
            if it >= 4:
                ms.append(float(m.group(2)))
                tok.append(float(m.group(4)))
    rows[name] = (ms, loss, tok)
print("| path | iterations | median ms/iter (4-13) | median tokens/s/GPU | last loss |")
print("|---|---|---|---|---|")
for name, (ms, loss, tok) in rows.items():
    med = statistics.median(ms) if ms else float("nan")
    print(f"| {name} | {len(loss)} | {med:.1f} | {statistics.median(tok) if tok else float('nan'):.0f} | "
          f"{loss[-1] if loss else '-'} |")
a, b = rows["single"][1], rows["nccl_ws1"][1]
print(f"\nlosses identical: {a == b and len(a) > 0} ({len(a)} vs {len(b)} iterations)")
if rows["single"][0] and rows["nccl_ws1"][0]:
    r = statistics.median(rows["nccl_ws1"][0]) / statistics.median(rows["single"][0])
    print(f"NCCL ws1 / single ms per iteration: {r:.3f}")
EOF
grep -h "data parallel over" "$OUT/dist_nccl_ws1.log"
grep -h "error" "$OUT"/dist_*.log | head -5
echo "total $(($(date +%s) - START)) s"
