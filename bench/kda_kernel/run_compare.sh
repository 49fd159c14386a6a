#!/bin/bash
# run_compare.sh - the KDA kernel timings of kda.c (bench/kda_kernel/bench_gpu.c) and of FLA
# (bench/kda_kernel/fla_kernel.py: chunk_kda, forward and forward + backward) in one GPU run,
# printed side by side with the ratio: $OUT/kda_kernel.md; raw output in $OUT/kda_kernel.log and
# $OUT/kda_kernel.jsonl (FLA's rows).
#
# Usage (repository root, on the GPU machine; carry .devdeps and .whl):
#   bash bench/kda_kernel/run_compare.sh
# The table has four kda.c-vs-FLA columns: SIMT (kda_fast.h, KDA_CORE=simt), TC v3 and TC v4
# (kda_tc.h, the model's default core; kernel version 4 is the default, KDA_TC_V=3 selects v3) and
# FLA, for the core forward, forward + backward, the kept-state (M0) forward + backward the model
# runs, and the layer rows. Check the tensor-core kernels first: ./build-gpu/kda_test gpu_kda_tc
# (must print "6 passed, 0 failed").
# Environment: FLA_ONE_CONFIG=1 (default; 0 = FLA's full autotune, minutes per shape on a fresh
# machine), SHAPES="32x64 128x128" (FLA's KxV; bench_gpu.c runs K32 V64 only), KDA_LIMIT=450
# (seconds for the whole script), FLA_LIMIT=300 (seconds for FLA's part: its full autotune of
# K = V = 128 took longer than 300 s on 2026-12-03).
#
# bench_gpu.c is built as bench/kda_kernel/device_run.sh builds it (same flags, CUDA libraries,
# carried deps), but linked against build-gpu/libkda.a rather than the listed objects: since
# src/cuda holds the model driver and trainer backend too, linking every object of src/cuda/
# pulls in symbols from the rest of the library; the archive takes only what the bench uses.
set -u
START=$(date +%s)
LIMIT=${KDA_LIMIT:-450}
budget() { # budget WANTED: min(WANTED, seconds left - 10), at least 1
    local left=$((LIMIT - ($(date +%s) - START) - 10))
    [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"
}
OUT=${OUT:-/tmp/kda-out}
SHAPES=${SHAPES:-32x64 128x128}
export FLA_ONE_CONFIG=${FLA_ONE_CONFIG:-1}
export TRITON_CACHE_AUTOTUNING=1 PYTHONUNBUFFERED=1
W=/tmp/kda_kernel_bench
mkdir -p "$OUT" "$W"
rm -f "$W/fla.jsonl" "$W/bench_gpu.log"
LOG=$OUT/kda_kernel.log

# shellcheck source=bench/train_throughput/gpu_env.sh
source bench/train_throughput/gpu_env.sh
kda_gpu_env > "$LOG" 2>&1 || { cat "$LOG"; exit 1; }
kda_fla_autotune_seed >> "$LOG" 2>&1 # FLA_ONE_CONFIG=0: its full autotune's recorded results
FLA_OK=1
kda_fla_env 2>> "$LOG" || { FLA_OK=0; echo "fla: not run: cannot import fla (carry .whl)"; }
kda_env_info | tee -a "$LOG"

# 1. kda.c: build (reuses build-gpu on a warm machine) and run bench_gpu
t0=$(date +%s)
CC=$(command -v cc || command -v gcc || echo cc)
if kda_gpu_build "$W/make.log" "$KDA_GPU_BUILD/libkda.a"; then
    echo "build: ok in $(($(date +%s) - t0)) s"
    if $CC -std=c11 -O2 -fopenmp -D_GNU_SOURCE -Isrc -DKDA_HAVE_CUDA=1 -I/usr/local/cuda/include \
        bench/kda_kernel/bench_gpu.c "$KDA_GPU_BUILD/libkda.a" -L/usr/local/cuda/lib64 -lcublasLt \
        -lcublas -lcudart_static -lopenblas -lzstd -lz -lsnappy -lyaml -ldl -lrt -lstdc++ -lm \
        -lpthread -o "$W/bench_gpu" >> "$W/make.log" 2>&1; then
        timeout "$(budget 120)" "$W/bench_gpu" > "$W/bench_gpu.log" 2>&1
        echo "bench_gpu: rc=$?"
    else
        echo "bench_gpu: link failed"
        tail -5 "$W/make.log"
    fi
else
    echo "build: FAILED in $(($(date +%s) - t0)) s"
    grep -E 'error|Error' "$W/make.log" | head -8
fi
{ echo "==== build"; cat "$W/make.log"; echo "==== bench_gpu"; cat "$W/bench_gpu.log"; } >> "$LOG" 2>&1
cat "$W/bench_gpu.log" 2> /dev/null

# 2. FLA
if [ $FLA_OK = 1 ]; then
    t0=$(date +%s)
    # shellcheck disable=SC2086 # SHAPES: several words
    timeout "$(budget "${FLA_LIMIT:-300}")" python3 bench/kda_kernel/fla_kernel.py --shapes $SHAPES \
        --out "$W/fla.jsonl" > "$W/fla.md" 2>> "$LOG"
    echo "fla_kernel: rc=$? in $(($(date +%s) - t0)) s"
    cat "$W/fla.md"
fi
cp "$W/fla.jsonl" "$OUT/kda_kernel.jsonl" 2> /dev/null

# 3. side by side
{
    echo "## KDA kernel: kda.c vs FLA, one GPU ($(date -u +%F))"
    echo
    echo "$(kda_env_info | tr '\n' ';' | sed 's/;$//; s/;/; /g'); FLA autotune: $([ "$FLA_ONE_CONFIG" = 1 ] && echo 'first config only (FLA_ONE_CONFIG=1)' || echo full)."
    echo
    python3 bench/kda_kernel/fla_kernel.py --compare "$W/bench_gpu.log" "$W/fla.jsonl"
    if [ -s "$W/fla.md" ]; then echo; cat "$W/fla.md"; fi
} > "$OUT/kda_kernel.md"
cat "$OUT/kda_kernel.md"
echo "total $(($(date +%s) - START)) s"
