#!/bin/bash
# device_zero1.sh - ZeRO-1 on GPU ranks at world size 1, in one device call: build, the GPU tests
# of the data-parallel path (`kda_test gpu_dist`: the NCCL communicator, ZeRO-1's shards against
# the whole model at a simulated world 3, ZeRO-1 vs plain data parallel and their resumes through
# kda_train), then `kda train` on KDA-300M, micro-batch 16, seq 2048, 13 iterations, three ways:
#   single      the plain single-GPU path (no communicator)
#   nccl_ws1    --nproc-per-node 1: rendezvous, NCCL, per-layer all-reduce during the backward
#   zero1_ws1   the same + use_distributed_optimizer: reduce-scatter after the backward, AdamW on
#               the shard, all-gather of the parameters (at world 1 the shard is everything:
#               the moments' saving, 8 B/parameter x (1 - 1/N), needs N > 1 GPUs)
# and prints one table: median ms/iteration over iterations 4-13, tokens/s, device memory (NVML
# peak through gpumem.py, and the log's cudaMemGetInfo peak), whether each run's losses equal the
# single path's bit for bit (they must: one rank's collectives are copies and the sharded update
# is the same element-wise arithmetic), and the ZeRO-1 startup line.
#
# Usage (repository root, on the GPU machine; carry .devdeps), about 4 minutes from cold:
#   bash bench/dist/device_zero1.sh
# Environment: OUT (default /tmp/kda-out) receives dist_zero1.md and the logs; MB=16 STEPS=13.
set -u
OUT=${OUT:-/tmp/kda-out}
MB=${MB:-16}
STEPS=${STEPS:-13}
W=/tmp/kda_dist

# shellcheck source=bench/dist/dist_env.sh
source bench/dist/dist_env.sh
dist_setup "$OUT/zero1_build.log" kda kda_test || exit 1

t0=$(date +%s)
NCCL_DEBUG=WARN KDA_BIN=$KDA timeout 240 "$KDA_GPU_BUILD/kda_test" gpu_dist \
    > "$OUT/zero1_gpu_tests.log" 2>&1
echo "gpu_dist tests ($(($(date +%s) - t0)) s): $(tail -1 "$OUT/zero1_gpu_tests.log")"
grep -E "^(ok|FAIL) " "$OUT/zero1_gpu_tests.log" | head -12

dist_random_data "$W/random" $((MB * STEPS + 64)) 2049 128256

run() { # NAME EXTRA-ARGS...
    local name=$1
    shift
    python3 $HERE/gpumem.py --out "$OUT/zero1_mem_$name.json" --timeout 200 -- \
        "$KDA" train --config $HERE/bench_300M.yaml --micro_batch_size "$MB" \
        --global_batch_size "$MB" --train_iters "$STEPS" --train_data_path "$W/random" \
        --no-progress "$@" > "$OUT/zero1_$name.log" 2>&1
    echo "$name: rc=$? ($(grep -c 'iteration ' "$OUT/zero1_$name.log") log lines)"
}
run single
run nccl_ws1 --nproc-per-node 1
run zero1_ws1 --nproc-per-node 1 --use_distributed_optimizer true

python3 - "$OUT" <<'EOF' | tee "$OUT/dist_zero1.md"
import json, re, statistics, sys
out = sys.argv[1]
names = ("single", "nccl_ws1", "zero1_ws1")
rows = {}
for name in names:
    ms, loss, tok, dev = [], [], [], float("nan")
    for line in open(f"{out}/zero1_{name}.log", errors="replace"):
        m = re.search(r"iteration +(\d+)/.*elapsed time per iteration \(ms\): ([\d.]+).*lm loss: ([\dE.+-]+)"
                      r".*tokens/s/GPU: ([\d.]+)", line)
        if m:
            it = int(m.group(1))
            loss.append(m.group(3))
            if it >= 4:
                ms.append(float(m.group(2)))
                tok.append(float(m.group(4)))
        d = re.search(r"device memory \(MiB\): [\d.]+ used, ([\d.]+) peak", line)
        if d:
            dev = float(d.group(1))
    try:
        nvml = json.load(open(f"{out}/zero1_mem_{name}.json"))["peak_mib"]
    except Exception:
        nvml = float("nan")
    rows[name] = (ms, loss, tok, dev, nvml)
print("| path | iterations | median ms/iter (4-13) | median tokens/s/GPU | NVML peak MiB | "
      "log peak MiB | losses == single |")
print("|---|---|---|---|---|---|---|")
ref = rows["single"][1]
for name, (ms, loss, tok, dev, nvml) in rows.items():
    med = statistics.median(ms) if ms else float("nan")
    same = loss == ref and len(loss) > 0
    print(f"| {name} | {len(loss)} | {med:.1f} | {statistics.median(tok) if tok else float('nan'):.0f} | "
          f"{nvml:.0f} | {dev:.0f} | {same} |")
base = statistics.median(rows["single"][0]) if rows["single"][0] else float("nan")
for name in names[1:]:
    if rows[name][0]:
        print(f"{name} / single ms per iteration: {statistics.median(rows[name][0]) / base:.3f}")
for name in names[1:]:
    a, b = rows["single"][1], rows[name][1]
    diff = [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y]
    print(f"losses {name} vs single: {'bit-identical' if a == b and a else 'DIFFER at ' + str(diff[:5])}")
EOF
grep -h "data parallel over" "$OUT/zero1_nccl_ws1.log" "$OUT/zero1_zero1_ws1.log"
grep -h "error" "$OUT"/zero1_*.log | head -5
echo "total $(($(date +%s) - START)) s"
