#!/bin/bash
# device_plan.sh - the performance issue's open measurements as numbered device calls (each one
# `run` of the device tool, <= 9.5 min; docs/perf-log.md "Next GPU session: the plan"), so a fresh
# checkout runs them without hand-written call scripts.
#
# Usage (repository root, on the GPU machine; carry .devdeps and .whl):
#   bash bench/device_plan.sh 1   # kda.c vs FLA (full autotune, recorded results) at mb 16/32/64,
#                                 # the whole GPU suite (also under KDA_FAST_EXP=0), bench_gpu (the
#                                 # core's per-kernel profile), the CE row kernels' shapes;
#                                 # TP_ENV="VAR=value ..." runs kda.c's throughput runs (only)
#                                 # with those switches
#   bash bench/device_plan.sh 2   # each switch against the defaults at mb 16, profile and timing
#   bash bench/device_plan.sh 3   # the kernel comparison with FLA (run_compare.sh); SHAPES=128x128
#                                 # gives FLA's K = V = 128 autotune the whole call
#   bash bench/device_plan.sh 4   # KDA-1B vs FLA at mb 8 and 16 (FLA autotunes 1B afresh)
#   bash bench/device_plan.sh 5   # the parity noise floor: the parity run with FLA's full autotune
#   bash bench/device_plan.sh 6   # Nsight Compute's counters of the step's slowest custom kernels
#                                 # (the KDA core's, the CE row kernel, conv), through bench_gpu
#   bash bench/device_plan.sh 7   # the settled clock: kda.c vs FLA at mb 16/32/64 over 40 timed
#                                 # steps after 10 (step 1 times 10 after 3), with the clock series
#   bash bench/device_plan.sh 8   # energy per call at the sustained power draw: every cuBLASLt
#                                 # candidate of the step's MLP, head and attention projection
#                                 # GEMMs (bench_gemm; GEMM_ROWS="proj": only the last), every
#                                 # bench_gpu row and the CE row kernels (KDA_BENCH_ENERGY)
#   bash bench/device_plan.sh 9   # interleaved A/B at mb TPUT_MB (16): the defaults and each
#                                 # candidate of AB (';'-separated settings), REPS (2) rounds
# Output: $OUT/stepN/ (the scripts' own outputs), $OUT/stepN.md (what is printed last), and
# $OUT/stepN.tgz (stepN/ packed: the device tool brings back a few files per call).
# LIMIT (default 560) bounds the whole step; every stage takes what is left.
set -u
STEP=${1:-}
case $STEP in 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9) ;; *)
    echo "usage: bash bench/device_plan.sh 1|2|3|4|5|6|7|8|9 (see the header)"
    exit 2
    ;;
esac
START=$(date +%s)
LIMIT=${LIMIT:-560}
left() { echo $((LIMIT - ($(date +%s) - START))); }
OUT=${OUT:-/tmp/kda-out}
D=$OUT/step$STEP
SUM=$OUT/step$STEP.md
mkdir -p "$D"
: > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }
pack() { tar czf "$OUT/step$STEP.tgz" -C "$OUT" "step$STEP" 2> /dev/null; }
trap pack EXIT
# shellcheck source=bench/train_throughput/gpu_env.sh
source bench/train_throughput/gpu_env.sh
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/kda_triton_cache}
B=${KDA_GPU_BUILD:-build-gpu}

# save_autotune NAME: every FLA autotune result in TRITON_CACHE_DIR into $D/fla_autotune_NAME.tgz
# (the layout of bench/train_throughput/fla_autotune_h200.tgz, to merge into it).
save_autotune() {
    (cd "$TRITON_CACHE_DIR/.." && find "$(basename "$TRITON_CACHE_DIR")" -name '*.autotune.json' |
        tar czf "$D/fla_autotune_$1.tgz" -T -) 2> /dev/null
}

# tput NAME ENV...: kda.c alone at mb TPUT_MB (16) with the switches ENV (profile at iteration 3
# unless PROFILE is in ENV), one line per run into the summary.
tput() {
    local name=$1 mb=${TPUT_MB:-16}
    shift
    [ "$(left)" -lt 40 ] && { say "$name: skipped (time)"; return; }
    local lim=$(($(left) < 90 ? $(left) : 90))
    env PROFILE=3 "$@" OUT="$D/$name" PARTS=kda MBS=$mb KDA_BIN="$B/kda" KDA_LIMIT=$lim \
        bash bench/train_throughput/run.sh > "$D/$name.txt" 2>&1
    say "$name [$*]: $(grep -E "^\| *$mb " "$D/$name/train_throughput.md" | cut -d'|' -f2-5)" \
        "$(grep -E 'KDA core|gate|conv|CE rows|AdamW|unaccounted|step \(wall' \
            "$D/$name/kda_profile_mb$mb.md" 2> /dev/null | cut -d'|' -f2,3,4 | tr '\n' ';')"
}

case $STEP in
1)
    # shellcheck disable=SC2086 # TP_ENV: VAR=value words for kda.c's throughput runs only
    env ${TP_ENV:-} OUT=$D/tp FLA_ONE_CONFIG=0 FLA_LIMIT=300 KDA_LIMIT=$(($(left) - 170)) \
        MBS="16 32 64" PROFILE=3 KDA_EXTRA_TARGETS="$B/kda_test $B/bench/bench_gpu" \
        bash bench/train_throughput/run.sh > "$D/tp.txt" 2>&1
    grep -E '^\| *(16|32|64) |^fla_train: mb|FLA autotune seed' "$D/tp.txt" "$D/tp/build.log" |
        cut -d: -f2- | tee -a "$SUM"
    tee -a "$SUM" < "$D/tp/kda_clock_mb16.md" # each iteration's clock, power, clock event reasons
    kda_gpu_env > /dev/null
    KDA_BIN=$B/kda timeout $(($(left) - 110)) "$B/kda_test" --gpu > "$D/suite.txt" 2>&1
    say "GPU suite: rc=$? $(tail -1 "$D/suite.txt")"
    grep '^FAIL' "$D/suite.txt" | tee -a "$SUM"
    # the suite under the precise exponentials (the default before session 10): the tests that
    # toggle KDA_FAST_EXP put it back (tests/gpu_ctx.h GpuEnv)
    if [ "$(left)" -gt 260 ]; then
        KDA_FAST_EXP=0 KDA_BIN=$B/kda timeout $(($(left) - 150)) "$B/kda_test" --gpu \
            > "$D/suite_precise.txt" 2>&1
        say "GPU suite, KDA_FAST_EXP=0: rc=$? $(tail -1 "$D/suite_precise.txt")"
        grep '^FAIL' "$D/suite_precise.txt" | tee -a "$SUM"
    fi
    timeout $(($(left) - 50)) "$B/bench/bench_gpu" > "$D/bench_gpu.txt" 2>&1
    say "bench_gpu: rc=$?"
    grep -A9 -E 'tc v[56] kept path per kernel' "$D/bench_gpu.txt" | tee -a "$SUM"
    [ "$(left)" -gt 45 ] && OUT=$D timeout $(($(left) - 5)) bash bench/kda_kernel/run_cls.sh cls \
        > "$D/cls.txt" 2>&1
    grep -iE 'row|pipe|cluster' "$D/cls.txt" | head -16 | tee -a "$SUM"
    # KDA-1B's per-op profile (its RMSNorm rows run the register kernels up to D = 2048 now)
    [ "$(left)" -gt 40 ] && env PROFILE=3 MODEL=configs/kda_1B.json OUT="$D/p1b" PARTS=kda MBS=8 \
        KDA_BIN="$B/kda" KDA_LIMIT=$(($(left) - 5)) bash bench/train_throughput/run.sh \
        > "$D/p1b.txt" 2>&1
    grep -E '^\| *8 |RMSNorm|step \(wall' "$D/p1b/train_throughput.md" \
        "$D/p1b/kda_profile_mb8.md" 2> /dev/null | cut -d: -f2- | tee -a "$SUM"
    ;;
2)
    kda_gpu_env > /dev/null && kda_gpu_build "$D/build.log" "$B/kda" "$B/kda_test" || exit 1
    # the model's tests on the paths the defaults of 2026-12-03 (sessions 5 and 6) replaced
    KDA_GATE_V=1 KDA_GRAPH=0 KDA_ADAMW_ONE=0 KDA_TC_V=4 KDA_CLS_ROW=0 KDA_MLP_RECOMPUTE=0 \
        KDA_BIN=$B/kda timeout 120 "$B/kda_test" --gpu gpu_model gpu_gate gpu_adamw \
        > "$D/tests.txt" 2>&1
    say "gpu_model gpu_gate gpu_adamw with the old paths: rc=$? $(tail -1 "$D/tests.txt")"
    # the model's tests on the paths the defaults of 2026-12-04 (session 11) replaced
    KDA_GEMM_RULES=0 KDA_DY_INPLACE=0 KDA_CONV_QKV=0 KDA_TC_V=5 KDA_BIN=$B/kda timeout 60 \
        "$B/kda_test" --gpu gpu_model gpu_fuse > "$D/tests_s10.txt" 2>&1
    say "gpu_model gpu_fuse with session 10's defaults: rc=$? $(tail -1 "$D/tests_s10.txt")"
    # the model's tests with both remaining switches on (=2: the combined backward too)
    KDA_CONV_QKV=2 KDA_PDL=1 KDA_BIN=$B/kda timeout 60 "$B/kda_test" --gpu gpu_model gpu_fuse \
        > "$D/tests_qkv.txt" 2>&1
    say "gpu_model gpu_fuse with KDA_CONV_QKV=2 KDA_PDL=1: rc=$? $(tail -1 "$D/tests_qkv.txt")"
    tput base
    tput tiles_off KDA_GEMM_TILES= # cuBLASLt's first pick (the default before session 9)
    tput graph_off KDA_GRAPH=0 PROFILE=
    tput base_noprof PROFILE=
    tput adamw_off KDA_ADAMW_ONE=0
    tput gate_v1 KDA_GATE_V=1
    tput conv_v1 KDA_CONV_V=1
    tput dy_off KDA_DY_INPLACE=0 # the contiguous dY buffers and copies (default before session 11)
    tput mlp_off KDA_MLP_RECOMPUTE=0
    tput tc4 KDA_TC_V=4
    tput tc5 KDA_TC_V=5 # the default before session 11
    tput cls0 KDA_CLS_ROW=0
    tput pdl KDA_PDL=1
    tput conv_qkv0 KDA_CONV_QKV=0 # three conv launches each way (default before session 11)
    tput conv_qkv2 KDA_CONV_QKV=2
    tput precise_exp KDA_FAST_EXP=0 # precise SiLU in the convs, precise CE sum pass
    tput rules_off KDA_GEMM_RULES=0 # the tile list alone (default before session 11)
    tput tune KDA_GEMM_TUNE=1
    ;;
3)
    OUT=$D FLA_ONE_CONFIG=0 KDA_LIMIT=$(($(left) - 15)) FLA_LIMIT=$(($(left) - 100)) \
        bash bench/kda_kernel/run_compare.sh > "$D/compare.txt" 2>&1
    say "run_compare: rc=$?"
    tail -30 "$D/compare.txt" | tee -a "$SUM"
    save_autotune kernel # the shapes run, to record beside the 300M ones
    ;;
4)
    OUT=$D/tp MODEL=configs/kda_1B.json FLA_ONE_CONFIG=0 FLA_LIMIT=$(($(left) - 120)) \
        KDA_LIMIT=$(($(left) - 10)) MBS="8 16" bash bench/train_throughput/run.sh > "$D/tp.txt" 2>&1
    grep -E '^\| *(8|16) |^fla_train: mb' "$D/tp.txt" | tee -a "$SUM"
    save_autotune 1B # the 1B shapes, to record beside the 300M ones
    ;;
5)
    OUT=$D/fla0 W=/tmp/par_fla0 FLA_ONE_CONFIG=0 LIMIT=$(($(left) - 10)) \
        bash bench/parity/run.sh > "$D/parity.txt" 2>&1
    say "parity (FLA full autotune): rc=$?"
    tail -12 "$D/parity.txt" | tee -a "$SUM"
    ;;
6)
    # Which of speed-of-light, occupancy or stalls bounds each kernel: the v1-v4 core predictions
    # missed by 2-4x without these counters. ncu works on the Firecracker runtime only
    # (device/KINDS.md); --clock-control none leaves the clocks alone (METHOD.md). Each regex
    # profiles one launch of the kernel after 3 of its warm-up launches, inside bench_gpu's run.
    kda_gpu_env > /dev/null && kda_gpu_build "$D/build.log" "$B/bench/bench_gpu" \
        "$B/bench/bench_cls" || exit 1
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
    [ -n "$NCU" ] || { say "ncu: not found"; exit 1; }
    # The default's kernels: the v5 core's kept path (tc_bwd5k_k: the main backward with the kept
    # Akk) and the trimmed CE rows; session 8's run (docs/log/gpu-2026-12-03.md §22) matched v4's
    # names and the untrimmed rows, the same shapes and limits. KERNELS overrides (space-separated
    # regexes). cls2_row_k is both row kernels (cluster and trimmed, one template): bench_cls
    # times the cluster one first (12 launches), so the 16th launch is the trimmed kernel's 4th.
    for k in ${KERNELS:-tc_bwd5k_k tc_intra5_k tc_state5_k tc_rstate5_k cls2_row_k conv_bwd_k}; do
        [ "$(left)" -lt 60 ] && { say "$k: skipped (time)"; continue; }
        bin=$B/bench/bench_gpu skip=3
        case $k in cls*) bin=$B/bench/bench_cls skip=15 ;; esac
        timeout $(($(left) - 30)) "$NCU" --clock-control none -k "regex:$k" -s $skip -c 1 \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
            --section ComputeWorkloadAnalysis --section InstructionStats -o "$D/$k" "$bin" \
            > "$D/$k.txt" 2>&1
        say "$k: rc=$?"
        "$NCU" -i "$D/$k.ncu-rep" --print-summary none > "$D/$k.details.txt" 2>&1
        # issue-bound (perf-log "v4: where the instructions go"): Issue Slots Busy 55-70 %,
        # Executed Ipc Active 2.3-2.6, the instruction count near the SASS estimate
        grep -E 'Duration|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A|Executed Instructions  |DRAM Throughput|Stall' \
            "$D/$k.details.txt" | head -24 | tee -a "$SUM"
    done
    ;;
7)
    # perf-log "One slow iteration in every run": 10 timed steps hold a clock clamp or not; 40
    # average over several. FLA at mb 64 needs ~65 s for its 50 steps.
    OUT=$D/tp FLA_ONE_CONFIG=0 WARMUP=10 STEPS=40 FLA_LIMIT=$(($(left) - 120)) \
        KDA_LIMIT=$(($(left) - 10)) MBS="16 32 64" bash bench/train_throughput/run.sh \
        > "$D/tp.txt" 2>&1
    grep -E '^\| *(16|32|64) |^fla_train: mb' "$D/tp.txt" | tee -a "$SUM"
    for mb in 16 32 64; do
        say "mb $mb clock: $(grep -cE 'power cap|power brake|slowdown' "$D/tp/kda_clock_mb$mb.md" \
            2> /dev/null) of $(($(wc -l < "$D/tp/kda_clock_mb$mb.md" 2> /dev/null) - 2)) iterations clamped"
    done
    ;;
8)
    # docs/perf-log.md "The training step is power-bound": a row's mJ per call at the sustained
    # draw is what it costs in the capped step (the medians run at the burst clock). 2 s a row.
    # bench_gemm first: the GEMMs are most of the step's joules, and a candidate cheaper in
    # joules than cuBLASLt's first pick is the largest lever left (KDA_GEMM_TILES picks it).
    kda_gpu_env > /dev/null && kda_gpu_build "$D/build.log" "$B/bench/bench_gpu" \
        "$B/bench/bench_cls" "$B/bench/bench_gemm" || exit 1
    # GEMM_ROWS: only the rows whose name contains it (e.g. "proj": the attention's projections)
    timeout $(($(left) - 150)) "$B/bench/bench_gemm" ${GEMM_ROWS:+"$GEMM_ROWS"} \
        > "$D/bench_gemm.txt" 2>&1
    say "bench_gemm: rc=$?"
    cat "$D/bench_gemm.txt" >> "$SUM"
    KDA_BENCH_ENERGY=${ENERGY_ROWS:-kept} timeout $(($(left) - 60)) "$B/bench/bench_gpu" \
        > "$D/bench_gpu.txt" 2>&1
    say "bench_gpu (energy): rc=$?"
    KDA_BENCH_ENERGY="row kernel" timeout $(($(left) - 10)) "$B/bench/bench_cls" \
        > "$D/bench_cls.txt" 2>&1
    say "bench_cls (energy): rc=$?"
    grep -B1 'sustained' "$D/bench_gpu.txt" "$D/bench_cls.txt" | grep -v '^--' | tee -a "$SUM"
    ;;
9)
    # The switches that passed their GPU tests, each against the defaults in the same call,
    # unprofiled (graphs on), interleaved so that the clock's drift hits both alike: a switch
    # becomes the default when its runs beat every defaults run by more than their spread.
    kda_gpu_env > /dev/null && kda_gpu_build "$D/build.log" "$B/kda" || exit 1
    # default candidates: session 10's defaults (the four switches flipped in session 11, which
    # were measured at mb 32 and 64 only) and the two remaining opt-ins
    IFS=';' read -r -a cands <<< "${AB:-KDA_GEMM_RULES=0 KDA_DY_INPLACE=0 KDA_CONV_QKV=0 KDA_TC_V=5;KDA_CONV_QKV=2;KDA_PDL=1}"
    for rep in $(seq "${REPS:-2}"); do
        tput "base_$rep" PROFILE=
        for i in "${!cands[@]}"; do
            # shellcheck disable=SC2086 # a candidate is a list of VAR=value words
            tput "ab${i}_$rep" PROFILE= ${cands[$i]}
        done
    done
    ;;
esac
say "step $STEP: $(($(date +%s) - START)) s"
