#!/bin/bash
# run.sh - the loss-parity benchmark: kda.c and FLA train KDA-300M side by side from FLA's own
# initialisation on the same 2048-token chunks in the same order, with the same learning rate
# every update, then score each other's final checkpoint on unseen chunks (README.md).
#
# Usage (repository root, on the GPU machine; carry .devdeps and .whl), one call of <= 9 min:
#   bash bench/parity/run.sh
# Output in $OUT: parity.md (the table, window means, cross-scores, pass bars), parity.json,
# kda_metrics.jsonl, fla_metrics.jsonl, kda_train.log, fla_train.log, build.log.
# Environment (defaults):
#   ITERS=300        iterations on both sides (micro-batch 16 = global batch, seq 2048)
#   PARTS="kda fla"  sides to run; PARTS=kda skips FLA (a CPU smoke test, see below)
#   DEVICE=cuda      kda.c's device
#   KDA_BIN=...      use this kda binary instead of building build-gpu/kda
#   KDA_ARGS=""      extra `kda train` arguments
#   NHELD=16         unseen chunks (of assets/text/moby_dick.txt) for the cross-scoring
#   SEQ=2048         only for the CPU smoke test (the FLA side is fixed at 2048 x 16)
#   LIMIT=540        seconds for the whole script; each stage gets what is left
#   FLA_ONE_CONFIG=1 one Triton autotune config per FLA kernel (tools/reference/fla_patch.py);
#                    0: FLA's full autotune, its recorded results first (FLA_AUTOTUNE_SEED,
#                    bench/train_throughput/gpu_env.sh)
# CPU smoke test of the kda side, the data and the chunk order (no torch needed):
#   PARTS=kda DEVICE=cpu KDA_BIN=build/kda ITERS=4 SEQ=128 \
#       KDA_ARGS="--model configs/demo_model.json --micro_batch_size 2 --global_batch_size 2" \
#       bash bench/parity/run.sh
#
# Order: the kda.c build runs in the background while fla_side.py builds the model, saves it
# (W/fla_init) and compiles its Triton kernels on two warm-up steps (weights restored after);
# then kda tokenize (training text assets/text/web_bible.txt, unseen text Moby-Dick), kda train
# from W/fla_init, kda export; then the FLA side trains with kda.c's learning rates while kda
# score rates kda.c's checkpoint; last kda score rates FLA's checkpoint and the report is made.
set -u
START=$(date +%s)
LIMIT=${LIMIT:-540}
budget() { # budget WANTED: min(WANTED, seconds left - 10), at least 1
    local left=$((LIMIT - ($(date +%s) - START) - 10))
    [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"
}
OUT=${OUT:-/tmp/kda-parity-out}
W=${W:-/tmp/kda_parity}
ITERS=${ITERS:-300}
PARTS=${PARTS:-kda fla}
DEVICE=${DEVICE:-cuda}
KDA_BIN=${KDA_BIN:-}
KDA_ARGS=${KDA_ARGS:-}
NHELD=${NHELD:-16}
SEQ=${SEQ:-2048}
export FLA_ONE_CONFIG=${FLA_ONE_CONFIG:-1} TRITON_CACHE_AUTOTUNING=1 PYTHONUNBUFFERED=1
HERE=bench/parity
TOK=assets/tokenizers/llama3/tokenizer.json
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
die() {
    echo "parity: FAILED: $*"
    exit 1
}
rm -rf "$W"
mkdir -p "$OUT" "$W"

# shellcheck source=bench/train_throughput/gpu_env.sh
source bench/train_throughput/gpu_env.sh
if [ "$DEVICE" = cuda ] && [ -z "$KDA_BIN" ]; then
    kda_gpu_env > "$OUT/build.log" 2>&1 || die "$(cat "$OUT/build.log")"
fi
if has fla; then
    kda_fla_env 2>> "$OUT/build.log" || die "cannot import fla (carry .whl)"
    kda_fla_autotune_seed >> "$OUT/build.log" # FLA_ONE_CONFIG=0: its recorded autotune results
fi
kda_env_info | tee -a "$OUT/build.log"

# 1. kda.c build (background) and the FLA side (background: init, warm-up, then waits)
BUILD_PID=""
if [ -z "$KDA_BIN" ]; then
    KDA_BIN=$KDA_GPU_BUILD/kda
    (
        t0=$(date +%s)
        kda_gpu_build "$W/make.log" "$KDA_BIN" && s=ok || s=FAILED
        echo "build $s in $(($(date +%s) - t0)) s" >> "$W/make.log"
    ) &
    BUILD_PID=$!
fi
FLA_PID=""
if has fla; then
    timeout "$(budget $((LIMIT - 20)))" python3 $HERE/fla_side.py run --work "$W" \
        --data "$W/train" --held-jsonl "$W/held.jsonl" --kda-metrics "$W/kda_ckpt/metrics.jsonl" \
        --kda-hf "$W/kda_hf" --iters "$ITERS" > "$OUT/fla_train.log" 2>&1 &
    FLA_PID=$!
fi
if [ -n "$BUILD_PID" ]; then
    wait "$BUILD_PID"
    cat "$W/make.log" >> "$OUT/build.log"
    tail -1 "$W/make.log"
fi
[ -x "$KDA_BIN" ] || die "no kda binary ($KDA_BIN); $(grep -m5 -E 'error|Error' "$OUT/build.log")"

# 2. data: tokenized here, with the bundled tokenizer
"$KDA_BIN" tokenize --tokenizer $TOK --input assets/text/web_bible.txt --output-prefix "$W/train" \
    --append-eod --quiet || die "kda tokenize (train)"
"$KDA_BIN" tokenize --tokenizer $TOK --input assets/text/moby_dick.txt --output-prefix "$W/held" \
    --append-eod --quiet || die "kda tokenize (held out)"
python3 $HERE/fla_side.py held --data "$W/held" --n "$NHELD" --seq "$SEQ" --out "$W/held.jsonl" ||
    die "held-out chunks"
python3 $HERE/fla_side.py chunks --data "$W/train" --seq "$SEQ" --iters 2 | cut -c1-160
echo "data ready at $(($(date +%s) - START)) s"

# 3. kda.c: train from FLA's init, export
INIT=()
if has fla; then
    for _ in $(seq 1 "$(budget 300)"); do
        [ -f "$W/fla_init.done" ] && break
        kill -0 "$FLA_PID" 2> /dev/null || die "the FLA side stopped: $(tail -3 "$OUT/fla_train.log")"
        sleep 1
    done
    [ -f "$W/fla_init.done" ] || die "FLA's init did not appear"
    INIT=(--init-from "$W/fla_init" --model "$W/fla_init/config.json")
fi
t0=$(date +%s)
# shellcheck disable=SC2086 # KDA_ARGS: several words
timeout "$(budget 240)" "$KDA_BIN" train --config $HERE/parity_300M.yaml --train_data_path "$W/train" \
    --save "$W/kda_ckpt" --train_iters "$ITERS" --seq_length "$SEQ" --device "$DEVICE" \
    --no-progress "${INIT[@]}" $KDA_ARGS > "$OUT/kda_train.log" 2>&1 ||
    die "kda train: $(tail -3 "$OUT/kda_train.log")"
echo "kda train: $ITERS iterations in $(($(date +%s) - t0)) s"
grep -m1 'iteration        1/' "$OUT/kda_train.log" | cut -c1-220
cp "$W/kda_ckpt/metrics.jsonl" "$OUT/kda_metrics.jsonl"
"$KDA_BIN" export --checkpoint "$W/kda_ckpt" --output "$W/kda_hf" --dtype fp32 > /dev/null ||
    die "kda export"
touch "$W/kda.done"

# 4. scores: kda.c's own checkpoint now (the FLA side trains meanwhile), FLA's when it is there
"$KDA_BIN" score --model "$W/kda_hf" --input "$W/held.jsonl" --device "$DEVICE" \
    > "$W/kda_scores_kda_final.jsonl" 2> /dev/null || die "kda score (kda.c's checkpoint)"
if ! has fla; then
    echo "PARTS=$PARTS: no FLA side; kda.c's held-out scores:"
    cat "$W/kda_scores_kda_final.jsonl"
    exit 0
fi
wait "$FLA_PID" || die "the FLA side failed: $(tail -5 "$OUT/fla_train.log")"
grep '^\[fla_side' "$OUT/fla_train.log"
"$KDA_BIN" score --model "$W/fla_final" --input "$W/held.jsonl" --device "$DEVICE" \
    > "$W/kda_scores_fla_final.jsonl" 2> /dev/null || die "kda score (FLA's checkpoint)"
cp "$W/fla_metrics.jsonl" "$OUT/fla_metrics.jsonl"

# 5. the report
python3 $HERE/fla_side.py report --work "$W" --out "$OUT"
rc=$?
echo "total $(($(date +%s) - START)) s; report rc=$rc (0: every bar passed, 3: a bar failed)"
exit $rc
