#!/bin/bash
# run_cls.sh - build kda.c's library on the GPU machine (build-gpu, as device_run.sh) and run
# the small benchmarks of bench/kda_kernel: bench_cls.c (the fused classifier's logits GEMM, row
# kernels and dX/dW GEMMs at one token chunk of the 300M micro-batch-16 step) and bench_proj.c
# (the KDA sublayer's projection GEMMs and copies at one layer, cuBLASLt's candidates); < 60 s
# each after the build (which reuses build-gpu objects); bench_gemm.c (the step's MLP and head
# GEMMs, every cuBLASLt candidate's time and energy per call at the sustained draw, ~3 min).
#
# Usage (repository root, on the device; carry .devdeps):
#   bash bench/kda_kernel/run_cls.sh [cls] [proj] [gemm]   # default: cls proj
# Output: the tables on stdout and in $OUT/bench_NAME.log.
set -u
OUT=${OUT:-/tmp/kda-out}
mkdir -p "$OUT"
# shellcheck source=bench/train_throughput/gpu_env.sh
source bench/train_throughput/gpu_env.sh
kda_gpu_env || exit 1
if ! kda_gpu_build "$OUT/build_cls.log" "$KDA_GPU_BUILD/libkda.a"; then
    echo "build FAILED"; grep -E 'error' "$OUT/build_cls.log" | head -10; exit 1
fi
CC=$(command -v cc || command -v gcc || echo cc)
for b in ${*:-cls proj}; do
    $CC -std=c11 -O2 -fopenmp -D_GNU_SOURCE -Isrc -DKDA_HAVE_CUDA=1 -I/usr/local/cuda/include \
        "bench/kda_kernel/bench_$b.c" "$KDA_GPU_BUILD/libkda.a" -L/usr/local/cuda/lib64 \
        -lcublasLt -lcublas -lcudart_static -ldl -lrt -lstdc++ -lm -lpthread -o "/tmp/bench_$b" ||
        exit 1
    echo "== bench_$b"
    t=120
    [ "$b" = gemm ] && t=400 # 9 shapes x up to 8 candidates x 2 s of sustained load
    timeout "$t" "/tmp/bench_$b" 2>&1 | tee "$OUT/bench_$b.log"
done
