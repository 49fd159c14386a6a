#!/bin/bash
# debug_run.sh - after bench/kda_kernel/device_run.sh has built the tree (repository root): build debug_chunk_bwd.cu in three
# variants (-O3, -G, -O3 -DKDA_CB_FENCE) and run each on three shapes; log to $OUT/debug.log.
set -u
OUT=${OUT:-/tmp/kda-out}
D=/tmp/kdadeps
export PATH=/usr/local/cuda/bin:$PATH
CUDALIB=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
export LIBRARY_PATH=$D/lib:$CUDALIB LD_LIBRARY_PATH=$D/lib:$CUDALIB
if [ -d build-gpu/src/cuda ]; then
    B=build-gpu/src
    L="$B/cuda/cuda_common.o $B/cpu/kda_chunk.o $B/cpu/kda_recurrent.o $B/core/error.o $B/core/rng.o"
else
    B=build-gpu-min
    L="$B/cuda_common.cu.o $B/kda_chunk.o $B/kda_recurrent.o $B/error.o $B/rng.o"
fi
F="-std=c++17 -Isrc -DKDA_HAVE_CUDA=1 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fopenmp"
S=dev/cuda/debug_chunk_bwd.cu
nvcc $F -O3 $S $L -lcublasLt -lcublas -o /tmp/d_o3 > "$OUT/debug_build.log" 2>&1 &
nvcc $F -G $S $L -lcublasLt -lcublas -o /tmp/d_g >> "$OUT/debug_build.log" 2>&1 &
nvcc $F -O3 -DKDA_CB_FENCE $S $L -lcublasLt -lcublas -o /tmp/d_f >> "$OUT/debug_build.log" 2>&1 &
wait
tail -5 "$OUT/debug_build.log"
for v in o3 g f; do
    echo "== variant $v"
    [ -x /tmp/d_$v ] || { echo "not built"; continue; }
    timeout 30 /tmp/d_$v
    timeout 20 /tmp/d_$v 3 1 1 4 4
    timeout 20 /tmp/d_$v 2 1 1 2 2
done 2>&1 | tee "$OUT/debug.log"
if command -v compute-sanitizer > /dev/null && [ -x /tmp/d_o3 ]; then
    timeout 40 compute-sanitizer --tool memcheck /tmp/d_o3 65 1 1 8 8 2>&1 | tail -4
fi
