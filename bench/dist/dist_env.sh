# shellcheck shell=bash
# dist_env.sh - the prologue every bench/dist/ device script sources (device_ws1.sh,
# device_zero1.sh, device_multi.sh): the machine's environment, the time budget, the build, the
# data sets and a plain rank launcher. Run from the repository root.
#
#   OUT=... W=... LIMIT=...; source bench/dist/dist_env.sh
# sets START (now), HERE (bench/train_throughput), DIST (bench/dist), mkdir -p "$OUT" "$W", and
# exports NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 (NVLink
# multicast stays off in every program the scripts start) and CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA's
# device i is NVML's device i, so per-GPU memory samples match CUDA_VISIBLE_DEVICES).
#   DEVICE=cuda (default): the GPU machine (bench/train_throughput/gpu_env.sh: the carried apt
#     bundle .devdeps, CUDA on the paths, the build in build-gpu with CUDA_ARCHS=90a)
#   DEVICE=cpu: this checkout's CPU build in ${KDA_CPU_BUILD:-build} (make -j${JOBS:-2})
#
#   budget WANTED       min(WANTED, seconds left of LIMIT (default 570) - 10), at least 1
#   left                seconds left of LIMIT
#   stage NAME          prints "== NAME (t = N s; previous stage M s)" and starts timing NAME
#   dist_setup LOG TARGET...
#                       environment (+ kda_env_info), then builds $BUILD_DIR/TARGET... (kda,
#                       kda_test, libkda.a); prints "build ok in N s" or the errors; sets KDA
#                       and KDA_TEST. Returns 1 when the environment or the build failed.
#   dist_build_harness SRC BIN
#                       compiles SRC (a C file) against $BUILD_DIR/libkda.a with the build's own
#                       CFLAGS and LDLIBS (read from the Makefile: NCCL, CUDA, Gloo included)
#   dist_random_data PREFIX NSEQ LEN VOCAB
#                       uniform random ids (make_random_dataset.py; multi.py random-data when
#                       numpy is missing)
#   dist_launch_env N PORT LOGPREFIX CMD...
#                       starts N ranks of CMD in the background with torchrun's variables (RANK,
#                       WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
#                       MASTER_PORT=PORT), rank r's output in LOGPREFIX.rank$r.log; their pids
#                       in the array RANK_PIDS. No agent between them: what one rank's death
#                       does to the others is theirs alone (the fault tests need that).

START=${START:-$(date +%s)}
LIMIT=${LIMIT:-570}
OUT=${OUT:-/tmp/kda-out}
W=${W:-/tmp/kda_dist}
DEVICE=${DEVICE:-cuda}
HERE=bench/train_throughput
DIST=bench/dist
mkdir -p "$OUT" "$W"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
[ "$NCCL_NVLS_ENABLE" = 0 ] || {
    echo "dist_env: NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE: NVLink multicast must stay off; set to 0" >&2
    export NCCL_NVLS_ENABLE=0
}
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID PYTHONUNBUFFERED=1

left() {
    echo $((LIMIT - ($(date +%s) - START)))
}

budget() { # budget WANTED: min(WANTED, seconds left - 10), at least 1
    local l=$(($(left) - 10))
    [ "$l" -lt "$1" ] && echo $((l > 1 ? l : 1)) || echo "$1"
}

STAGE_NAME=""
STAGE_T0=$START
stage() { # stage NAME
    local now
    now=$(date +%s)
    if [ -n "$STAGE_NAME" ]; then
        echo "== $STAGE_NAME took $((now - STAGE_T0)) s"
    fi
    STAGE_NAME=$1
    STAGE_T0=$now
    [ -n "$1" ] && echo "== $1 (t = $((now - START)) s, $(left) s left)"
    return 0
}

if [ "$DEVICE" = cuda ]; then
    # shellcheck source=bench/train_throughput/gpu_env.sh
    source $HERE/gpu_env.sh
    BUILD_DIR=$KDA_GPU_BUILD
else
    BUILD_DIR=${KDA_CPU_BUILD:-build}
fi
KDA=$BUILD_DIR/kda
# shellcheck disable=SC2034 # for the scripts that source this one
KDA_TEST=$BUILD_DIR/kda_test
DIST_WERROR=-Werror # the harness follows the build: WERROR= when gpu_env.sh fell back

dist_setup() { # LOG TARGET...
    local log=$1 t0 targets=()
    shift
    for t in "$@"; do targets+=("$BUILD_DIR/$t"); done
    if [ "$DEVICE" = cuda ]; then
        kda_gpu_env || return 1
        kda_env_info
        t0=$(date +%s)
        kda_gpu_build "$log" "${targets[@]}" || {
            echo "build FAILED:"
            grep -E 'error' "$log" | head -20
            return 1
        }
        [ -f "$log.werror" ] && DIST_WERROR=
    else
        echo "device: cpu ($(nproc --all) cores); $(cc --version 2> /dev/null | head -1)"
        t0=$(date +%s)
        make -j"${JOBS:-2}" BUILD="$BUILD_DIR" "${targets[@]}" > "$log" 2>&1 || {
            echo "build FAILED:"
            grep -E 'error' "$log" | head -20
            return 1
        }
    fi
    echo "build ok in $(($(date +%s) - t0)) s ($BUILD_DIR: $*)"
    if [ "$DEVICE" = cuda ] && [ -x "$KDA" ]; then
        ldd "$KDA" | grep -qi nccl && echo "NCCL: linked ($(ldd "$KDA" | grep -i nccl |
            awk '{print $3}'))" || echo "warning: kda is not linked against NCCL (GPU ranks > 1 will fail)"
    fi
    return 0
}

# The build's flags, as the Makefile computes them for BUILD_DIR (the same variables
# kda_gpu_build passes on the GPU machine).
dist_make_var() { # EXPR, e.g. '$(CFLAGS)'
    local extra=()
    [ "$DEVICE" = cuda ] && extra=(KDA_CUDA=1 CUDA_ARCHS="${KDA_CUDA_ARCHS:-90a}")
    make -s --no-print-directory BUILD="$BUILD_DIR" WERROR="$DIST_WERROR" "${extra[@]}" \
        --eval "dist-print-var: ; @echo \"$1\"" dist-print-var
}

dist_build_harness() { # SRC BIN
    local src=$1 bin=$2 cflags ldlibs cc
    cc=$(command -v cc || command -v gcc || echo cc)
    # shellcheck disable=SC2016 # make expands them, not the shell
    cflags=$(dist_make_var '$(CFLAGS)' | sed 's/-MMD -MP//') || return 1
    # shellcheck disable=SC2016
    ldlibs=$(dist_make_var '$(LDFLAGS) $(LDLIBS)') || return 1
    # shellcheck disable=SC2086 # the flags are several words
    $cc $cflags "$src" "$BUILD_DIR/libkda.a" $ldlibs -o "$bin"
}

dist_random_data() { # PREFIX NSEQ LEN VOCAB
    if python3 -c 'import numpy' 2> /dev/null; then
        python3 $HERE/make_random_dataset.py "$1" --sequences "$2" --length "$3" --vocab "$4" \
            --seed 1234 2>&1 | tail -1
    else
        python3 $DIST/multi.py random-data "$1" --sequences "$2" --length "$3" --vocab "$4" \
            --seed 1234 2>&1 | tail -1
    fi
}

RANK_PIDS=()
dist_launch_env() { # N PORT LOGPREFIX CMD...
    local n=$1 port=$2 logp=$3 r
    shift 3
    RANK_PIDS=()
    for ((r = 0; r < n; r++)); do
        RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port "$@" > "$logp.rank$r.log" 2>&1 &
        RANK_PIDS+=($!)
    done
}
