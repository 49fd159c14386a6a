#!/bin/bash
# run.sh - training throughput of kda.c (`kda train`, device: cuda) and FLA (fla_train.py) for
# KDA-300M on the same GPU in one run: tokens/s, ms/step, peak GPU memory, step-1 loss and the
# ratio kda.c / FLA per micro-batch, as a Markdown table ($OUT/train_throughput.md) and JSON lines
# ($OUT/train_throughput.jsonl). Full logs: $OUT/kda_train.log, $OUT/fla_train.log,
# $OUT/build.log; $OUT/kda_clock_mbMB.md: each kda.c iteration's wall ms beside the SM clock,
# power and NVML's clock event reasons sampled inside it (gpumem.py --series, report.py series).
#
# Usage (repository root, on the GPU machine; carry .devdeps and .whl):
#   bash bench/train_throughput/run.sh
# Environment (defaults):
#   MODEL=configs/kda_300M.json  the model config of both sides (configs/kda_1B.json: KDA-1B)
#   MBS="16 32 64"   micro-batch sizes (sequence length SEQ, no accumulation: gbs = mb)
#   TRY_MBS=""       larger sizes tried after MBS until the first failure ("largest that fits")
#   SEQ=2048 WARMUP=3 STEPS=10   WARMUP untimed steps, then STEPS timed steps, both sides
#   PARTS="kda fla"  which sides to run
#   FLA_ONE_CONFIG=1 one Triton autotune config per FLA kernel (tools/reference/fla_patch.py);
#                    0 = FLA's full autotune (tuned kernels, ~6 min of autotuning on a fresh
#                    machine). The table says which was used.
#   KDA_LIMIT=570    seconds for the whole script; each stage gets what is left
#   FLA_LIMIT=330    seconds for the FLA side (its warm-up, autotune included, and timed steps)
#   FLA_AUTOTUNE_SEED=bench/train_throughput/fla_autotune_h200.tgz   with FLA_ONE_CONFIG=0: the
#                    results of FLA's own full autotune on an H200 (gpu_env.sh), so a fresh machine
#                    skips its benchmarking; "" = autotune from scratch
#   KDA_BIN=...      use this kda binary instead of building build-gpu/kda
#   KDA_EXTRA_TARGETS=""  more make targets for the background build (e.g. build-gpu/kda_test),
#                    so a device call needs one build only
#   KDA_ARGS=""      extra `kda train` arguments (a CPU smoke test of this script:
#                    PARTS=kda KDA_BIN=build/kda KDA_ARGS="--device cpu --model configs/tiny.json"
#                    VOCAB=256 SEQ=128 MBS="2 4")
#   VOCAB=128256     ids of the random dataset are < VOCAB
#   PROFILE=""       N: `kda train --profile N` (per-op table of iteration N, CUDA events) per
#                    micro-batch, into $OUT/kda_profile_mbMB.md and the output; N = WARMUP keeps
#                    the profiled step out of the timed window (it starts at iteration WARMUP's
#                    log line)
#
# Order: the kda.c build (make build-gpu/kda, as bench/kda_kernel/device_run.sh builds) runs in
# the background while FLA compiles its Triton kernels in its warm-up steps; fla_train.py waits
# for the build to finish before its timed steps (--wait-file), so nothing else uses the CPUs
# while either side is timed. Then kda train runs once per micro-batch.
#
# GPU memory: `kda train` reports host RSS only, so both sides' device memory is sampled from
# NVML every 50 ms (gpumem.py: memory in use on the GPU, CUDA context and caches included);
# FLA's torch.cuda.max_memory_allocated (tensors only, the number of performance.md §3) is
# reported beside it.
set -u
START=$(date +%s)
LIMIT=${KDA_LIMIT:-570}
budget() { # budget WANTED: min(WANTED, seconds left - 10), at least 1
    local left=$((LIMIT - ($(date +%s) - START) - 10))
    [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"
}
OUT=${OUT:-/tmp/kda-out}
MODEL=${MODEL:-configs/kda_300M.json}
[ -f "$MODEL" ] || { echo "run.sh: MODEL=$MODEL: no such model config (expected e.g. configs/kda_1B.json)"; exit 1; }
MBS=${MBS:-16 32 64}
TRY_MBS=${TRY_MBS:-}
SEQ=${SEQ:-2048}
WARMUP=${WARMUP:-3}
STEPS=${STEPS:-10}
PARTS=${PARTS:-kda fla}
KDA_BIN=${KDA_BIN:-}
KDA_ARGS=${KDA_ARGS:-}
VOCAB=${VOCAB:-128256}
PROFILE=${PROFILE:-}
export FLA_ONE_CONFIG=${FLA_ONE_CONFIG:-1}
export TRITON_CACHE_AUTOTUNING=1 # keep autotune results on disk: a second run on a warm machine
export PYTHONUNBUFFERED=1        # reuses them
W=/tmp/kda_bench
HERE=bench/train_throughput
mkdir -p "$OUT" "$W"
rm -f "$W/build.done" "$W/results.jsonl"
RES=$W/results.jsonl
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

# shellcheck source=bench/train_throughput/gpu_env.sh
source $HERE/gpu_env.sh
{ date -u; kda_gpu_env && echo "deps: ok"; } > "$OUT/build.log" 2>&1
if has fla && ! kda_fla_env 2>> "$OUT/build.log"; then
    echo "fla: not run: cannot import fla (carry .whl)"
    PARTS=${PARTS//fla/}
fi
kda_env_info | tee -a "$OUT/build.log"
has fla && kda_fla_autotune_seed | tee -a "$OUT/build.log"
echo "MODEL=$MODEL FLA_ONE_CONFIG=$FLA_ONE_CONFIG MBS='$MBS' TRY_MBS='$TRY_MBS' SEQ=$SEQ WARMUP=$WARMUP STEPS=$STEPS"

# 1. kda.c build in the background (touches build.done either way)
BUILD_PID=""
if has kda && [ -z "$KDA_BIN" ]; then
    KDA_BIN=$KDA_GPU_BUILD/kda
    (
        t0=$(date +%s)
        # shellcheck disable=SC2086 # KDA_EXTRA_TARGETS: several words
        if kda_gpu_build "$W/make.log" "$KDA_BIN" ${KDA_EXTRA_TARGETS:-}; then s=ok; else s=FAILED; fi
        echo "build $s in $(($(date +%s) - t0)) s" >> "$W/make.log"
        touch "$W/build.done"
    ) &
    BUILD_PID=$!
else
    touch "$W/build.done"
fi

# 2. random ids for kda train: enough (SEQ+1)-token sequences for every step of the largest run
max_mb=0
for mb in $MBS $TRY_MBS; do [ "$mb" -gt "$max_mb" ] && max_mb=$mb; done
nseq=$(((WARMUP + STEPS) * max_mb))
[ "$nseq" -lt 1024 ] && nseq=1024
if has kda; then
    python3 $HERE/make_random_dataset.py "$W/random" --sequences "$nseq" \
        --length $((SEQ + 1)) --vocab "$VOCAB" --seed 1234 > "$W/dataset.log" 2>&1 || {
        echo "run.sh: make_random_dataset.py failed (it needs numpy): $(tail -1 "$W/dataset.log")"
        exit 1
    }
    tail -1 "$W/dataset.log"
fi

# 3. FLA (its warm-up overlaps the build; timed steps wait for build.done)
if has fla; then
    t0=$(date +%s)
    # shellcheck disable=SC2086
    timeout "$(budget "${FLA_LIMIT:-330}")" python3 $HERE/fla_train.py --config "$MODEL" --seq "$SEQ" \
        --mb $MBS ${TRY_MBS:+--try-mb $TRY_MBS} --warmup "$WARMUP" --steps "$STEPS" \
        --wait-file "$W/build.done" --out "$RES" > "$OUT/fla_train.log" 2>&1
    rc=$?
    echo "fla: rc=$rc in $(($(date +%s) - t0)) s"
    grep '^fla_train:' "$OUT/fla_train.log"
    [ $rc -ne 0 ] && tail -5 "$OUT/fla_train.log"
fi

# 4. kda.c, one `kda train` per micro-batch
if [ -n "$BUILD_PID" ]; then
    wait "$BUILD_PID"
    cat "$W/make.log" >> "$OUT/build.log"
    tail -1 "$W/make.log"
fi
if has kda && [ -x "$KDA_BIN" ]; then
    : > "$OUT/kda_train.log"
    for mb in $MBS $TRY_MBS; do
        t0=$(date +%s)
        log=$W/kda_mb$mb.log
        # shellcheck disable=SC2086 # KDA_ARGS: several words
        python3 $HERE/gpumem.py --out "$W/mem_mb$mb.json" --timeout "$(budget 200)" \
            --series "$W/series_mb$mb.tsv" -- \
            "$KDA_BIN" train --config $HERE/bench_300M.yaml --model "$MODEL" --micro_batch_size "$mb" \
            --global_batch_size "$mb" --seq_length "$SEQ" --train_iters $((WARMUP + STEPS)) \
            --train_data_path "$W/random" --no-progress ${PROFILE:+--profile "$PROFILE"} \
            $KDA_ARGS > "$log" 2>&1
        rc=$?
        if [ -n "$PROFILE" ]; then
            sed -n '/^profile of iteration/,/step (wall)/p' "$log" > "$OUT/kda_profile_mb$mb.md"
            cat "$OUT/kda_profile_mb$mb.md"
        fi
        { echo "==== kda train mb $mb: rc=$rc"; cat "$log"; } >> "$OUT/kda_train.log"
        # per iteration: wall ms beside the SM clock, power and NVML's clock event reasons
        python3 $HERE/report.py series "$log" "$W/series_mb$mb.tsv" > "$OUT/kda_clock_mb$mb.md" \
            2> /dev/null
        python3 $HERE/report.py kda-log "$log" --mb "$mb" --seq "$SEQ" --warmup "$WARMUP" \
            --mem "$W/mem_mb$mb.json" --rc $rc | tee -a "$RES" | cut -c1-200
        echo "kda mb $mb: rc=$rc in $(($(date +%s) - t0)) s"
        if [ $rc -ne 0 ]; then
            tail -3 "$log"
            case " $TRY_MBS " in *" $mb "*) break ;; esac # the largest that fits was the last
        fi
    done
elif has kda; then
    echo "kda: no binary (build failed); tail of the build log:"
    grep -E 'error|Error' "$OUT/build.log" | head -10
fi

# 5. the table
cp "$RES" "$OUT/train_throughput.jsonl" 2>/dev/null
{
    python3 $HERE/report.py table "$RES" \
        --title "Training throughput, $(basename "$MODEL" .json), seq $SEQ, one GPU ($(date -u +%F))" \
        --note "$(kda_env_info | tr '\n' ';' | sed 's/;$//; s/;/; /g')" \
        --note "$WARMUP warm-up steps then $STEPS timed steps per micro-batch, no gradient accumulation; random token ids; AdamW lr 2e-4 (0.9, 0.95, 1e-8, wd 0.01), clip 1.0, fp32 master weights, bf16 compute, on both sides." \
        --note "kda.c ms/step: wall clock between the log lines of the first and last timed iteration (log_interval 1); FLA: CUDA events around the timed steps. tokens/s = micro-batch x $SEQ / (ms/step)." \
        --note "GPU mem used: peak device memory in use from NVML, sampled every 50 ms (CUDA context and allocator caches included); FLA max_memory_allocated: torch's tensor peak. kda train's own 'peak memory' is host RSS." \
        --note "FLA autotune: $([ "$FLA_ONE_CONFIG" = 1 ] && echo 'first config only (FLA_ONE_CONFIG=1): FLA kernels may be slower than with its full autotune' || echo "full$([ -n "${FLA_AUTOTUNE_SEED-x}" ] && echo ' (its chosen configs from FLA_AUTOTUNE_SEED where they match: see build.log)')")." \
        --note "kda.c targets: seq_length tokens + 1 per sample, $SEQ targets per row; FLA: $SEQ input ids, $((SEQ - 1)) targets per row; both count $SEQ tokens per row."
} > "$OUT/train_throughput.md"
cat "$OUT/train_throughput.md"
echo "total $(($(date +%s) - START)) s"
