#!/bin/bash
# hellaswag_gpu.sh - time `kda eval` on HellaSwag with a KDA-300M-shaped model on the GPU, and
# check the GPU's per-request loglikelihoods against the fp32 CPU on a few documents.
#
# Usage (repository root, on the GPU machine):
#   bash bench/eval/hellaswag_gpu.sh [DATA_DIR]      (default bench/eval/data)
# DATA_DIR holds HellaSwag in a layout `kda eval` reads (docs/eval.md):
#   DATA_DIR/hellaswag.jsonl[.gz]                                    lm-eval HF rows (0-shot task)
#   DATA_DIR/hf_datasets/hellaswag/none/validation/*.arrow (+ json)   HF datasets, 10,042 rows
#   DATA_DIR/oe_eval_tasks/hellaswag/<variant>/requests.jsonl.gz     OLMo requests
# The first that exists is used: the full validation set as `--tasks hellaswag`, else OLMo's
# val_rc_5shot / rc_0shot (full), else rc_5shot (the 1,000-document subsample in
# bench/eval/data; its contexts are 5-shot, so ~5x longer than 0-shot).
# Environment (defaults):
#   KDA_BIN=build-gpu/kda   the binary (built with `make BUILD=build-gpu` when missing)
#   CONFIG=configs/kda_300M.json   model shape (random init: lr 0 for one step, then exported)
#   BATCH_TOKENS="16384 65536"     --batch-tokens values timed (one eval run each)
#   CPU_DOCS=8              documents also scored on the CPU (fp32) to compare per-request ll
#   DEVICE=cuda  LIMIT=     a CPU smoke test of this script: DEVICE=cpu LIMIT=10 CPU_DOCS=2
#                           CONFIG=<a small config with vocab_size 128256> KDA_BIN=build/kda
#   OUT=/tmp/kda-out        $OUT/hellaswag_timing.txt (summary), logs and results next to it
set -u
KDA_BIN=${KDA_BIN:-build-gpu/kda}
CONFIG=${CONFIG:-configs/kda_300M.json}
BATCH_TOKENS=${BATCH_TOKENS:-16384 65536}
CPU_DOCS=${CPU_DOCS:-8}
DEVICE=${DEVICE:-cuda}
LIMIT=${LIMIT:-}
LIMIT_ARG=${LIMIT:+--limit $LIMIT}
OUT=${OUT:-/tmp/kda-out}
DATA=${1:-bench/eval/data}
W=/tmp/kda_eval_bench
TOK=assets/tokenizers/llama3/tokenizer.json
SUM=$OUT/hellaswag_timing.txt
mkdir -p "$OUT" "$W"
log() { echo "$*" | tee -a "$SUM"; }
: > "$SUM"

if [ ! -x "$KDA_BIN" ]; then
    echo "building $KDA_BIN"
    make -j"$(nproc)" BUILD="$(dirname "$KDA_BIN")" "$KDA_BIN" > "$OUT/build.log" 2>&1 ||
        { tail -20 "$OUT/build.log"; exit 1; }
fi

# 1. Task choice.
TASK=""
if ls "$DATA"/hellaswag.jsonl* > /dev/null 2>&1 ||
    ls "$DATA"/hf_datasets/hellaswag/*/validation/*.arrow > /dev/null 2>&1; then
    TASK=hellaswag
else
    for v in val_rc_5shot rc_0shot rc_5shot; do
        if [ -f "$DATA/oe_eval_tasks/hellaswag/$v/requests.jsonl.gz" ]; then
            TASK=olmo:hellaswag/$v
            break
        fi
    done
fi
[ -n "$TASK" ] || { log "no HellaSwag data under $DATA"; exit 1; }

# 2. A KDA-300M-shaped model with random weights: one training step at lr 0 on a small text
#    dataset (AdamW with lr 0 leaves the initialization unchanged), exported as an HF dir.
# shellcheck source=bench/eval/random_init.sh
source bench/eval/random_init.sh
if [ ! -f "$W/model/model.safetensors" ]; then
    kda_random_init "$KDA_BIN" "$CONFIG" "$DEVICE" "$W" "$OUT/init.log" &&
        "$KDA_BIN" export --checkpoint "$W/ckpt" --output "$W/model" --dtype fp32 \
            --tokenizer $TOK >> "$OUT/init.log" 2>&1 || { tail -20 "$OUT/init.log"; exit 1; }
fi
"$KDA_BIN" info --model "$W/model" > "$OUT/model_info.txt" 2>&1 || true

log "kda eval --tasks $TASK --data $DATA $LIMIT_ARG (model: $CONFIG shape, random init, fp32 weights)"
log "binary: $KDA_BIN ($(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
log "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"

# 3. Timed GPU runs (whole task; wall time includes model load, tokenization and CUDA init; the
#    "requests in X s" line is the scoring alone).
for bt in $BATCH_TOKENS; do
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$KDA_BIN" eval --model "$W/model" --tasks "$TASK" --data "$DATA" --device "$DEVICE" \
        --batch-tokens "$bt" --output "$OUT/results_gpu_$bt.json" $LIMIT_ARG \
        > "$OUT/eval_gpu_$bt.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    log ""
    log "--batch-tokens $bt: exit $rc, wall $(awk "BEGIN {printf \"%.2f\", $t1 - $t0}") s"
    grep -E "device:|documents, .* requests in|tokenizer:" "$OUT/eval_gpu_$bt.log" | tee -a "$SUM"
    grep -E "^\| " "$OUT/eval_gpu_$bt.log" | tee -a "$SUM"
    [ $rc -eq 0 ] || tail -5 "$OUT/eval_gpu_$bt.log" | tee -a "$SUM"
done

# 4. GPU (bf16) vs CPU (fp32) per-request loglikelihoods on the first CPU_DOCS documents (the
#    dumps also feed tools/reference/eval_reference.py; they stay in $W, not $OUT: 5-shot dumps
#    of the whole task are large).
if [ "$CPU_DOCS" -gt 0 ]; then
    for dev in "$DEVICE" cpu; do
        "$KDA_BIN" eval --model "$W/model" --tasks "$TASK" --data "$DATA" --device $dev \
            --limit "$CPU_DOCS" --dump-requests "$W/requests_$dev.jsonl" \
            > "$OUT/eval_check_$dev.log" 2>&1 || { tail -5 "$OUT/eval_check_$dev.log"; exit 1; }
    done
    cp "$W/requests_cpu.jsonl" "$OUT/requests_cpu_${CPU_DOCS}docs.jsonl"
    python3 - "$W/requests_cpu.jsonl" "$W/requests_$DEVICE.jsonl" << 'PY' | tee -a "$SUM"
import json, sys
cpu = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gpu = {(r["doc"], r["idx"]): r for r in map(json.loads, open(sys.argv[2]))}
worst_abs = worst_rel = 0.0
for r in cpu:
    g = gpu[(r["doc"], r["idx"])]
    d = abs(g["ll"] - r["ll"])
    worst_abs, worst_rel = max(worst_abs, d), max(worst_rel, d / max(1.0, abs(r["ll"])))
print(f"\nGPU bf16 vs CPU fp32 over {len(cpu)} requests: max |dll| {worst_abs:.4g}, "
      f"max |dll|/max(1,|ll|) {worst_rel:.3g}")
PY
fi
echo "summary: $SUM"
