#!/bin/bash
# device_perf.sh - the performance work's check on one GPU in ONE device call (<= 9 min): build
# kda.c (build-gpu), run the GPU tests of the code it touches, then `kda train --profile` and the
# training throughput of KDA-300M (kda.c only: run.sh PARTS=kda) before/after in the same call:
# the switched-off path (KDA_CLASSIFIER=legacy KDA_GEMM_PLAN=0 KDA_INPROJ=0 KDA_CORE_KEEP=0: the
# code before this work) at micro-batch 16, the default path with each switch set of CMP on top
# (default "KDA_FUSE=0;KDA_GATEUP=1": the fused elementwise kernels off, then the opt-in gate|up
# GEMM on) at micro-batch 16, then the default
# path at micro-batch 16/32/64. Prints the mb-16 profile tables (and the CMP vs default rows
# side by side) and the tokens/s last.
#
# Usage (repository root, on the GPU machine; carry .devdeps and .whl):
#   bash bench/train_throughput/device_perf.sh
# The tests run with KDA_INPROJ=1 (the opt-in fused input projection, not yet run on a GPU; the
# default path passed on 2026-12-01). Environment: KDA_LIMIT=540 (seconds for the whole script), TESTS="gpu_model gpu_eval gpu_ops
# gpu_kda_fast_small gpu_xent fuse_host" (kda_test filters), MBS="16 32 64", SKIP_TESTS=1 (skip
# the tests), SKIP_BEFORE=1 (skip the switched-off run), CMP="KDA_FUSE=0;KDA_GATEUP=1" (switch
# sets, ';'-separated, one mb-16 comparison run each; CMP="" skips them).
# Output under $OUT: build.log, gpu_tests.log, before/, cmp1/, cmp2/ ... and after/ (run.sh's outputs, the
# profiles kda_profile_mbN.md among them), summary.md (what is printed last).
set -u
START=$(date +%s)
LIMIT=${KDA_LIMIT:-540}
left() { echo $((LIMIT - ($(date +%s) - START))); }
OUT=${OUT:-/tmp/kda-out}
TESTS=${TESTS:-gpu_model gpu_eval gpu_ops gpu_kda_fast_small gpu_xent fuse_host}
CMP=${CMP-KDA_FUSE=0;KDA_GATEUP=1}
IFS=';' read -r -a CMPS <<< "$CMP"
MBS=${MBS:-16 32 64}
HERE=bench/train_throughput
mkdir -p "$OUT/before" "$OUT/after"

# shellcheck source=bench/train_throughput/gpu_env.sh
source $HERE/gpu_env.sh
kda_gpu_env || exit 1
kda_env_info | tee "$OUT/env.txt"
t0=$(date +%s)
if ! kda_gpu_build "$OUT/build.log" "$KDA_GPU_BUILD/kda" "$KDA_GPU_BUILD/kda_test"; then
    echo "build FAILED:"
    grep -E 'error' "$OUT/build.log" | head -20
    exit 1
fi
echo "build ok in $(($(date +%s) - t0)) s"

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    t0=$(date +%s)
    # shellcheck disable=SC2086 # TESTS: several filters
    KDA_INPROJ=1 timeout "$(($(left) > 400 ? 200 : 100))" "$KDA_GPU_BUILD/kda_test" $TESTS \
        > "$OUT/gpu_tests.log" 2>&1
    echo "gpu tests ($TESTS): rc=$? in $(($(date +%s) - t0)) s: $(tail -1 "$OUT/gpu_tests.log")"
    grep -E '^FAIL|^    tests/' "$OUT/gpu_tests.log" | head -20
    grep -E 'fused classifier|xent 3 chunks' "$OUT/gpu_tests.log" | head -8
fi

run_kda() { # DIR MBS [ENV=VALUE...]: run.sh for kda.c with the profile of iteration 3
    local dir=$1 mbs=$2
    shift 2
    env "$@" OUT="$dir" PARTS=kda MBS="$mbs" PROFILE=3 KDA_BIN="$KDA_GPU_BUILD/kda" \
        KDA_LIMIT="$(($(left) - 20))" bash $HERE/run.sh > "$dir/run.log" 2>&1
    echo "run.sh $* MBS='$mbs': rc=$?"
}
if [ "${SKIP_BEFORE:-0}" != 1 ] && [ "$(left)" -gt 200 ]; then
    run_kda "$OUT/before" 16 KDA_CLASSIFIER=legacy KDA_GEMM_PLAN=0 KDA_INPROJ=0 KDA_CORE_KEEP=0
fi
for i in "${!CMPS[@]}"; do
    [ "$(left)" -gt 150 ] || break
    mkdir -p "$OUT/cmp$((i + 1))"
    # shellcheck disable=SC2086 # a switch set: several VAR=VALUE words
    run_kda "$OUT/cmp$((i + 1))" 16 KDA_INPROJ=1 ${CMPS[$i]}
done
[ "$(left)" -gt 60 ] && run_kda "$OUT/after" "$MBS" KDA_INPROJ=1 # opt-in until measured

{
    echo "## before (KDA_CLASSIFIER=legacy KDA_GEMM_PLAN=0 KDA_INPROJ=0 KDA_CORE_KEEP=0), mb 16"
    cat "$OUT/before/kda_profile_mb16.md" 2> /dev/null
    echo
    echo "## after (defaults), mb 16"
    cat "$OUT/after/kda_profile_mb16.md" 2> /dev/null
    echo
    for i in "${!CMPS[@]}"; do
        echo "## A = cmp$((i + 1)) (${CMPS[$i]}), B = after (defaults), mb 16: ms per profile row"
        python3 $HERE/prof_diff.py "$OUT/cmp$((i + 1))/kda_profile_mb16.md" \
            "$OUT/after/kda_profile_mb16.md" 2> /dev/null
        echo
    done
    for d in before $(for i in "${!CMPS[@]}"; do echo "cmp$((i + 1))"; done) after; do
        echo "## $d: tokens/s"
        grep -E '^\| *[0-9]+ ' "$OUT/$d/train_throughput.md" 2> /dev/null | cut -c1-160
    done
} > "$OUT/summary.md"
cat "$OUT/summary.md"
echo "total $(($(date +%s) - START)) s"
