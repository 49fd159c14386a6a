#!/bin/bash
# device_run.sh - build kda.c on a bare GPU machine and run the GPU test suite (`gpu_*`), then
# compute-sanitizer passes; full logs under $OUT, a short summary on stdout.
#
# The GPU machine has nvcc but none of our apt dependencies (OpenBLAS, zstd, snappy, libyaml), and
# nothing can be installed there. So the dev machine packs their headers and shared libraries into
# .devdeps/deps.tgz (an ignored folder, passed to the device tool's `carry`); this script unpacks
# it to /tmp/kdadeps and points gcc at it through CPATH / LIBRARY_PATH / LD_LIBRARY_PATH, with no
# Makefile change. If the full build fails (another module mid-edit, a newer gcc's -Werror), a
# minimal build of just what the GPU tests link follows; .devdeps/kda_test_prebuilt.gz (built on
# the dev machine) is the last resort.
#
# Usage (repository root, on the device): bash bench/kda_kernel/device_run.sh [test filters...]
set -u
START=$(date +%s)
LIMIT=${KDA_LIMIT:-400} # seconds for the whole script; each stage gets what is left
budget() { # budget WANTED: min(WANTED, seconds left - 5), at least 1
    local left=$(( LIMIT - ($(date +%s) - START) - 5 ))
    [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"
}
OUT=${OUT:-/tmp/kda-out}
mkdir -p "$OUT"
FILTERS=${*:-gpu_kda test_gpu_ops} # this suite only (other gpu_* tests: pass gpu_)
D=/tmp/kdadeps
mkdir -p "$D" && tar xzf .devdeps/deps.tgz -C "$D" || { echo "cannot unpack .devdeps/deps.tgz"; exit 1; }
export PATH=/usr/local/cuda/bin:$PATH
CUDALIB=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
export CPATH=$D/include LIBRARY_PATH=$D/lib:$CUDALIB
export LD_LIBRARY_PATH=$D/lib:$CUDALIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{ date; nvidia-smi; command -v nvcc; nvcc --version; cc --version | head -1; uname -a
  head -2 /etc/os-release; nproc; command -v compute-sanitizer; } > "$OUT/env.log" 2>&1
grep -m1 -o 'NVIDIA H[0-9A-Za-z ]*' "$OUT/env.log"; nvcc --version | tail -1
CC=$(command -v cc || command -v gcc || echo cc)

NVFLAGS="-std=c++17 -O3 -g -lineinfo -Isrc -DKDA_HAVE_CUDA=1 -gencode arch=compute_90a,code=sm_90a \
 -gencode arch=compute_90,code=sm_90 -Xcompiler -Wall,-Wextra -Werror all-warnings"
minimal_build() { # the GPU tests and what they link, nothing else (no zstd/snappy/yaml)
    local B=build-gpu-min
    mkdir -p $B
    local objs=() pids=()
    for f in src/cuda/cuda_common.cu src/cuda/gemm_cuda.cu src/cuda/norm_cuda.cu src/cuda/conv_*cuda.cu \
             src/cuda/kda_gate_cuda.cu src/cuda/swiglu_cuda.cu src/cuda/embed_cuda.cu \
             src/cuda/optim_cuda.cu src/cuda/kda_cuda.cu; do
        nvcc $NVFLAGS -c "$f" -o $B/$(basename "$f" .cu).cu.o & pids+=($!)
        objs+=($B/$(basename "$f" .cu).cu.o)
    done
    for f in src/core/error.c src/core/util.c src/core/rng.c src/core/log.c src/cpu/*.c \
             src/model/optim.c tests/test_main.c tests/test_gpu_ops.c tests/test_gpu_kda.c; do
        $CC -std=c11 -O2 -g -fopenmp -D_GNU_SOURCE -Isrc -Itests -DKDA_HAVE_CUDA=1 \
           -I/usr/local/cuda/include -c "$f" -o $B/$(basename "$f" .c).o & pids+=($!)
        objs+=($B/$(basename "$f" .c).o)
    done
    for p in "${pids[@]}"; do wait "$p" || return 1; done
    $CC -fopenmp -o $B/kda_test "${objs[@]}" -lopenblas -lz -lm -lpthread -L/usr/local/cuda/lib64 \
       -lcublasLt -lcublas -lcudart_static -ldl -lrt -lstdc++
}

t0=$(date +%s)
BIN=""
if make -j16 CC="$CC" BUILD=build-gpu build-gpu/kda_test > "$OUT/build.log" 2>&1; then
    BIN=./build-gpu/kda_test
else
    echo "full build failed; tail of build.log:"
    grep -E 'error|Error' "$OUT/build.log" | head -8
    if minimal_build >> "$OUT/build.log" 2>&1; then
        BIN=./build-gpu-min/kda_test
    elif [ -f .devdeps/kda_test_prebuilt.gz ]; then
        echo "minimal build failed too: using the dev machine's prebuilt binary"
        gunzip -c .devdeps/kda_test_prebuilt.gz > /tmp/kda_test_prebuilt && chmod +x /tmp/kda_test_prebuilt
        export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$D/lib-fallback
        BIN=/tmp/kda_test_prebuilt
    else
        echo "no binary"; tail -20 "$OUT/build.log"; exit 1
    fi
fi
echo "binary: $BIN (build $(( $(date +%s) - t0 )) s)"

t0=$(date +%s)
timeout "$(budget 200)" "$BIN" $FILTERS > "$OUT/test.log" 2>&1
echo "tests: rc=$? in $(( $(date +%s) - t0 )) s"
# Summary: every test's verdict, then the worst error of each comparison over all shapes.
grep -E '^(ok|FAIL) ' "$OUT/test.log"
grep -E 'test_gpu.*\.c:[0-9]+:' "$OUT/test.log" | head -20
awk '/ rel [^ ]+ \(tol/ { w = $0; sub(/ +n=.*/, "", w); sub(/^ +/, "", w)
       r = $0; sub(/.* rel /, "", r); sub(/ .*/, "", r)
       if (!(w in m)) { key[++k] = w; m[w] = r }
       else if (m[w] !~ /inf|nan/ && (r ~ /inf|nan/ || r + 0 > m[w] + 0)) m[w] = r }
     END { for (i = 1; i <= k; i++) printf "  worst %-40s %s\n", key[i], m[key[i]] }' "$OUT/test.log"
grep -E 'device|TFLOP|bit-equal|clip coef|grad norm|embed N=2048' "$OUT/test.log" | head -12
tail -1 "$OUT/test.log"

# Kernel timings at the 300M shapes (not with the prebuilt binary: no objects to link).
OBJS=""
# The library archive: it pulls in only what bench_gpu.c references (the kernels and what they
# call).
[ "$BIN" = ./build-gpu/kda_test ] && OBJS="build-gpu/libkda.a"
[ "$BIN" = ./build-gpu-min/kda_test ] && OBJS="build-gpu-min/*.cu.o build-gpu-min/error.o build-gpu-min/rng.o"
if [ -n "$OBJS" ] && [ "${KDA_BENCH:-1}" = 1 ]; then
    $CC -std=c11 -O2 -fopenmp -D_GNU_SOURCE -Isrc -DKDA_HAVE_CUDA=1 -I/usr/local/cuda/include \
       bench/kda_kernel/bench_gpu.c $OBJS -L/usr/local/cuda/lib64 -lcublasLt -lcublas \
       -lcudart_static -ldl -lrt -lstdc++ -lm -lpthread -o /tmp/bench_gpu > "$OUT/bench.log" 2>&1 &&
        timeout "$(budget 90)" /tmp/bench_gpu >> "$OUT/bench.log" 2>&1
    echo "bench: rc=$?"
    cat "$OUT/bench.log"
fi

# sanitize TOOL SECONDS PATTERN SET...: one compute-sanitizer run per test set (its filters), the
# summary lines matching PATTERN on stdout, the whole output appended to $OUT/TOOL.log.
sanitize() {
    local tool=$1 secs=$2 pattern=$3 set t0
    shift 3
    for set in "$@"; do
        t0=$(date +%s)
        timeout "$(budget "$secs")" compute-sanitizer --tool "$tool" --error-exitcode 7 "$BIN" $set \
            > "$OUT/$tool.log.tmp" 2>&1
        echo "$tool [$set]: rc=$? in $(( $(date +%s) - t0 )) s"
        grep -E "$pattern" "$OUT/$tool.log.tmp" | head -5
        cat "$OUT/$tool.log.tmp" >> "$OUT/$tool.log"; rm -f "$OUT/$tool.log.tmp"
    done
}

if [ "${KDA_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
    sanitize memcheck 45 'ERROR SUMMARY|Invalid|passed, ' \
        "gpu_device gpu_rmsnorm gpu_l2norm gpu_conv gpu_gate gpu_beta gpu_gnorm gpu_swiglu gpu_embed gpu_adamw gpu_grad" \
        gpu_kda_fast_small gpu_kda_tc_small
    # racecheck: the fast KDA core, the tensor-core core (v3 and v4: cp.async tiles, warp groups,
    # named barriers), then the op kernels with shared-memory reductions (ops v2)
    sanitize racecheck 60 'RACECHECK SUMMARY|ERROR SUMMARY|hazard|passed, ' \
        gpu_kda_fast_small gpu_kda_tc_small "gpu_conv gpu_rmsnorm gpu_gate gpu_gnorm gpu_swiglu gpu_grad"
fi
echo "total $(( $(date +%s) - START )) s"
