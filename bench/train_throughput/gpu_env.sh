# shellcheck shell=bash
# gpu_env.sh - sourced by bench/train_throughput/run.sh and bench/kda_kernel/run_compare.sh on
# the bare GPU machine: the build environment of bench/kda_kernel/device_run.sh (our apt
# dependencies from the carried .devdeps/deps.tgz, CUDA on the paths), a build of kda.c into
# build-gpu (the directory device_run.sh uses, so a warm machine reuses its objects), and FLA
# from the carried wheels in .whl when python3 cannot import it.
#
#   source bench/train_throughput/gpu_env.sh
#   kda_gpu_env                  # -> 0, or 1 with a message when deps.tgz cannot be unpacked
#   kda_gpu_build LOG TARGET...  # make -j BUILD=$KDA_GPU_BUILD CUDA_ARCHS=90a TARGET... > LOG 2>&1
#                                #    (KDA_CUDA_ARCHS overrides; sm_90a only: half the nvcc time)
# KDA_GPU_BUILD (default build-gpu) names the build directory; targets are given with it.
#   kda_fla_env                  # -> 0 when torch and fla.ops.kda import (installing .whl/*.whl
#                                #    into /tmp/site, on PYTHONPATH, if needed)
#   kda_env_info                 # GPU, driver, nvcc, python packages: a few lines on stdout
#   kda_fla_autotune_seed        # with FLA_ONE_CONFIG=0: unpack FLA_AUTOTUNE_SEED (default
#                                #    bench/train_throughput/fla_autotune_h200.tgz, "" = none) into
#                                #    $TRITON_CACHE_DIR; prints what it did (one line)

KDA_DEPS=/tmp/kdadeps
KDA_GPU_BUILD=${KDA_GPU_BUILD:-build-gpu}

kda_gpu_env() {
    if [ ! -f .devdeps/deps.tgz ]; then
        echo "gpu_env: .devdeps/deps.tgz is missing (carry .devdeps)" >&2
        return 1
    fi
    if ! { mkdir -p "$KDA_DEPS" && tar xzf .devdeps/deps.tgz -C "$KDA_DEPS"; }; then
        echo "gpu_env: cannot unpack .devdeps/deps.tgz" >&2
        return 1
    fi
    export PATH=/usr/local/cuda/bin:$PATH
    local cudalib=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib
    export CPATH=$KDA_DEPS/include LIBRARY_PATH=$KDA_DEPS/lib:$cudalib
    export LD_LIBRARY_PATH=$KDA_DEPS/lib:$cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    return 0
}

kda_gpu_build() { # LOG TARGET...
    local log=$1
    shift
    local cc
    cc=$(command -v cc || command -v gcc || echo cc)
    make -j"$(nproc)" CC="$cc" BUILD="$KDA_GPU_BUILD" KDA_CUDA=1 CUDA_ARCHS="${KDA_CUDA_ARCHS:-90a}" "$@" > "$log" 2>&1 && return 0
    # This machine's host compiler may warn where the dev machine's does not (2026-12-01: g++
    # maybe-uninitialized in xent_cuda.cu cost a whole device call): say so loudly, then build
    # with warnings as warnings so the call still measures something.
    echo "gpu_env: the -Werror build FAILED; its errors (fix them on the dev machine):" >&2
    grep -E 'error' "$log" | head -10 >&2
    mv "$log" "$log.werror"
    make -j"$(nproc)" CC="$cc" BUILD="$KDA_GPU_BUILD" KDA_CUDA=1 CUDA_ARCHS="${KDA_CUDA_ARCHS:-90a}" WERROR= "$@" > "$log" 2>&1
}

kda_fla_env() {
    local check='import torch, fla; from fla.ops.kda import chunk_kda' # `import fla` alone is lazy
    if python3 -c "$check" > /dev/null 2>&1; then return 0; fi
    if ls .whl/*.whl > /dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl > /dev/null 2>&1
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    python3 -c "$check" > /dev/null 2>&1 || {
        echo "gpu_env: cannot import torch and fla.ops.kda (carry .whl with the FLA wheels)" >&2
        return 1
    }
}

kda_env_info() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null |
        head -1 | grep . || echo "no nvidia-smi"
    nvcc --version 2> /dev/null | grep -o 'release [0-9.]*' | sed 's/^/nvcc /' || echo "no nvcc"
    cc --version 2> /dev/null | head -1
    python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' \
        2> /dev/null || echo "no torch/triton"
    python3 -c 'import fla, transformers; print("fla", fla.__version__, "transformers", transformers.__version__)' \
        2> /dev/null || echo "no fla/transformers"
}

# The results of FLA 0.6.0's own full autotune (Triton's *.autotune.json: the timings of every
# config and the one chosen), recorded on one H200 on 2026-12-03 (bench/train_throughput/run.sh,
# FLA_ONE_CONFIG=0: KDA-300M at mb 16/32/64, docs/log/gpu-2026-12-03.md §5, 37 results; KDA-1B at
# mb 8/16, §12, 38 more; the kernel comparison's K = V = 128 shapes, §21, 19 more). With
# TRITON_CACHE_AUTOTUNING=1 Triton reuses them where its key (kernel source, Triton version, GPU,
# shapes) matches: FLA runs the configs its autotune chose without the ~330 s of benchmarking them
# again; where nothing matches (another FLA, Triton or GPU) it autotunes as usual.
kda_fla_autotune_seed() {
    local seed=${FLA_AUTOTUNE_SEED-bench/train_throughput/fla_autotune_h200.tgz}
    if [ "${FLA_ONE_CONFIG:-1}" != 0 ] || [ -z "$seed" ]; then return 0; fi
    export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/kda_triton_cache}
    if [ ! -f "$seed" ]; then
        echo "FLA autotune seed: $seed not found; FLA autotunes in full"
        return 0
    fi
    mkdir -p "$TRITON_CACHE_DIR" &&
        tar xzf "$seed" -C "$TRITON_CACHE_DIR" --strip-components=1 &&
        echo "FLA autotune seed: $(tar tzf "$seed" | grep -c autotune.json) results of FLA's full autotune from $seed in $TRITON_CACHE_DIR"
}
