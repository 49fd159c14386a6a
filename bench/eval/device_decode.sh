#!/bin/bash
# device_decode.sh - the GPU's recurrent decode against the re-feed it replaced, in one call of at
# most ~90 s: `kda generate --device cuda` with --decode recurrent (prefill, then one O(1) step per
# token with the state on the device) and --decode refeed (the whole-sequence forward per token,
# O(T^2)), greedy, on a KDA-300M-shaped model with random weights, for two prompt lengths; then
# `kda eval` on OLMo's HellaSwag requests on the GPU with the default sharing rule, with every
# document shared and with batched forwards only (the rule's DECODE_COST_GPU and
# PREFILL_COST_GPU in src/cli/cmd_eval.c are estimates this measures).
#
# Usage (repository root, on the GPU machine): bash bench/eval/device_decode.sh
# Environment (defaults):
#   KDA_BIN=build-gpu/kda   the binary (built with bench/train_throughput/gpu_env.sh when missing)
#   CONFIG=configs/kda_300M.json   model shape (random init: one training step at lr 0)
#   PROMPTS="128 1024"      prompt lengths (token ids); NEW=256 new tokens each
#   EVAL_LIMIT=200          HellaSwag documents for the eval stage (0: skip it)
#   DEVICE=cuda             cpu: a smoke test of this script (CONFIG=<small>, NEW=16)
#   OUT=/tmp/kda-out        $OUT/decode_timing.txt (the summary) and the logs
# Prints per path: prefill s, decode tokens/s (stderr line of kda generate) and how many leading
# greedy ids the two paths share (bf16 may flip a near-tie later).
set -u
START=$(date +%s)
KDA_BIN=${KDA_BIN:-build-gpu/kda}
CONFIG=${CONFIG:-configs/kda_300M.json}
PROMPTS=${PROMPTS:-128 1024}
NEW=${NEW:-256}
EVAL_LIMIT=${EVAL_LIMIT:-200}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-/tmp/kda-out}
W=/tmp/kda_decode_bench
SUM=$OUT/decode_timing.txt
mkdir -p "$OUT" "$W"
: > "$SUM"
log() { echo "$*" | tee -a "$SUM"; }

if [ ! -x "$KDA_BIN" ]; then
    # shellcheck source=bench/train_throughput/gpu_env.sh
    source bench/train_throughput/gpu_env.sh
    kda_gpu_env || exit 1
    KDA_GPU_BUILD=$(dirname "$KDA_BIN") kda_gpu_build "$OUT/build.log" "$KDA_BIN" ||
        { tail -20 "$OUT/build.log"; exit 1; }
fi

# A model with random weights: one training step at lr 0 (AdamW leaves the init unchanged).
# shellcheck source=bench/eval/random_init.sh
source bench/eval/random_init.sh
if [ ! -d "$W/ckpt" ]; then
    head -2000 assets/text/moby_dick.txt > "$W/text.txt"
    TEXT=$W/text.txt kda_random_init "$KDA_BIN" "$CONFIG" "$DEVICE" "$W" "$OUT/decode_init.log" ||
        exit 1
fi
log "kda generate, greedy, $NEW new tokens, model $CONFIG (random init), device $DEVICE"
log "binary: $KDA_BIN ($(git rev-parse --short HEAD 2> /dev/null || echo unknown))"
log "$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)"

for P in $PROMPTS; do
    IDS=$(python3 -c "import random; r=random.Random($P); print(','.join(str(r.randrange(1000, 100000)) for _ in range($P)))")
    for mode in recurrent graph refeed; do # graph: recurrent with KDA_DECODE_GRAPH=1
        dec=$mode graph=0
        [ $mode = graph ] && dec=recurrent graph=1
        KDA_DECODE_GRAPH=$graph timeout 60 "$KDA_BIN" generate --model "$W/ckpt" \
            --prompt-ids "$IDS" --device "$DEVICE" --decode $dec --max-new-tokens "$NEW" \
            --temperature 0 --ignore-eos --no-echo \
            > "$W/ids_${P}_$mode.txt" 2> "$W/gen_${P}_$mode.log"
        rc=$?
        line=$(grep "kda generate:" "$W/gen_${P}_$mode.log" | tail -1)
        log "prompt $P, --decode $dec, KDA_DECODE_GRAPH=$graph (rc $rc): ${line#kda generate: }"
    done
    cmp -s "$W/ids_${P}_recurrent.txt" "$W/ids_${P}_graph.txt" &&
        log "prompt $P: graph ids = eager ids" || log "prompt $P: graph ids DIFFER from eager ids"
    same=$(python3 - "$W/ids_${P}_recurrent.txt" "$W/ids_${P}_refeed.txt" << 'PY'
import sys
a, b = (open(f).read().split() for f in sys.argv[1:3])
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
print(f"{n} of {len(a)}")
PY
)
    log "prompt $P: leading greedy ids identical between the two paths: $same"
done

# kda eval on the GPU: the default sharing rule, every document shared (prefill once, decode
# each choice: KDA_EVAL_DECODE_COST=1 KDA_EVAL_PREFILL_COST=0) and batched forwards only.
TASKDIR=bench/eval/data
if [ "$EVAL_LIMIT" -gt 0 ] && [ -f $TASKDIR/oe_eval_tasks/hellaswag/rc_5shot/requests.jsonl.gz ]; then
    for run in default all-shared no-share-prefix; do
        left=$((90 - ($(date +%s) - START) - 5))
        [ "$left" -gt 5 ] || { log "eval $run: no time left"; continue; }
        flag=--share-prefix dc= pc=
        [ $run = all-shared ] && dc=1 pc=0
        [ $run = no-share-prefix ] && flag=--no-share-prefix
        KDA_EVAL_DECODE_COST=$dc KDA_EVAL_PREFILL_COST=$pc timeout "$left" "$KDA_BIN" eval \
            --model "$W/ckpt" --tasks olmo:hellaswag/rc_5shot --data $TASKDIR \
            --limit "$EVAL_LIMIT" --device "$DEVICE" $flag \
            --tokenizer assets/tokenizers/llama3/tokenizer.json \
            > "$W/eval_$run.out" 2> "$W/eval_$run.log"
        log "eval $run (rc $?): $(grep -E 'requests in' "$W/eval_$run.log" | tail -1)"
        grep -E '^\| ' "$W/eval_$run.out" | tail -2 | tee -a "$SUM"
    done
fi
log "total $(($(date +%s) - START)) s"
