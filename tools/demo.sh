#!/usr/bin/env bash
# demo.sh - what `make demo` runs after the build: tokenize Moby-Dick with the bundled Llama-3
# tokenizer, train a tiny KDA model on the CPU for a few minutes (progress bar, falling
# validation loss), save a checkpoint, sample a few continuations from it with `kda generate`,
# export an HF model directory and plot the loss curve. Everything goes under out/demo/.
#
#   tools/demo.sh [extra kda-train flags, e.g. --train_iters 200]
#   env: KDA (binary, default build/kda), DEMO_OUT (default out/demo), DEMO_RESUME=1 keeps the
#        previous checkpoints (the run resumes from them instead of starting fresh).
set -euo pipefail
cd "$(dirname "$0")/.."

KDA=${KDA:-build/kda}
OUT=${DEMO_OUT:-out/demo}
TOK=assets/tokenizers/llama3/tokenizer.json
TEXT=assets/text/moby_dick.txt
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

[ -x "$KDA" ] || { echo "demo: $KDA not found; run 'make' first" >&2; exit 1; }

# 1. Data: the book cut into 100-line documents (BOS before each), one indexed dataset.
if [ ! -f "$OUT/data/moby.idx" ]; then
    echo "== tokenizing $TEXT"
    rm -rf "$OUT/docs" && mkdir -p "$OUT/docs" "$OUT/data"
    split -l 100 -d -a 4 --additional-suffix=.txt "$TEXT" "$OUT/docs/part_"
    "$KDA" tokenize --tokenizer "$TOK" --input "$OUT/docs" --output-prefix "$OUT/data/moby" \
        --txt-docs file --bos
fi

# 2. Train (fresh unless DEMO_RESUME=1).
[ "${DEMO_RESUME:-0}" = 1 ] || rm -rf "$OUT/checkpoints"
echo "== training (configs/train_demo.yaml; Ctrl-C saves a checkpoint and stops)"
start=$(date +%s)
"$KDA" train --config configs/train_demo.yaml --train_data_path "$OUT/data/moby" \
    --save "$OUT/checkpoints" "$@"
echo "== training took $(( $(date +%s) - start )) s"

# 3. Samples from the latest checkpoint (chunked prefill, then one recurrent step per token;
#    tokens/s on stderr). A build without `kda generate` skips this step.
if "$KDA" generate --help >/dev/null 2>&1; then
    echo "== samples (temperature 0.8, top-k 40, seed 1)"
    for prompt in "Call me" "The whale" "Captain Ahab"; do
        "$KDA" generate --model "$OUT/checkpoints" --tokenizer "$TOK" --prompt "$prompt" \
            --max-new-tokens 32 --temperature 0.8 --top-k 40 --seed 1 ||
            echo "(generate failed; skipping)"
    done
else
    echo "== samples: skipped (this build has no 'kda generate')"
fi

# 4. Export to an HF directory and plot the curves.
"$KDA" export --checkpoint "$OUT/checkpoints" --output "$OUT/hf" --dtype bf16 --tokenizer "$TOK"
"$KDA" plot "$OUT/checkpoints/metrics.jsonl" -o "$OUT/loss.svg"

cat <<MSG
== done
  checkpoints:   $OUT/checkpoints/ (latest: $(cat "$OUT/checkpoints/latest" 2>/dev/null))
  metrics:       $OUT/checkpoints/metrics.jsonl
  loss plot:     $OUT/loss.svg
  HF export:     $OUT/hf/ (config.json, model.safetensors, tokenizer files)
  resume:        $KDA train --config configs/train_demo.yaml --save $OUT/checkpoints \\
                   --train_data_path $OUT/data/moby --train_iters 160
MSG
