#!/bin/bash
# device_eval.sh - everything the evaluation issue needs from the GPU machine, in one call of at
# most ~5 minutes: (1) the GPU eval tests (`kda_test gpu_eval`), (2) the HellaSwag timing of
# bench/eval/hellaswag_gpu.sh (KDA-300M shape, random init), (3) the FLA + transformers reference
# (tools/reference/eval_reference.py) on a small model: per-request loglikelihoods of the fp32 CPU
# path vs FLA, PASS = token ids equal, max |Δll| <= 1e-3, acc/acc_norm decisions identical; then,
# for information, the GPU (bf16) dump vs FLA. A short summary on stdout and in $OUT/summary.txt.
#
# Usage (repository root, on the GPU machine; carry .devdeps and .whl):
#   bash bench/eval/device_eval.sh
# Order: FLA wheels install and a background Triton warm-up of FLA's forward kernels, the build,
# the tests, the reference (the issue's correctness bar), the HellaSwag timing, then the GPU dump
# vs FLA if time is left.
# Task data: bench/eval/data (OLMo's hellaswag and arc_easy rc_5shot request files, in the repo;
# its README says where they come from and how to add the full HellaSwag set).
#
# Environment (defaults):
#   KDA_LIMIT=295       seconds for the whole script; each stage gets min(its share, what is left)
#   DATA=bench/eval/data  task data (docs/eval.md "Data")
#   KDA_BIN=            a prebuilt kda (then no build; build-gpu/kda_test is used if present)
#   DEVICE=cuda         cpu: a smoke test of this script on a machine without a GPU
#   STAGES="test hellaswag reference"
#   HS_CONFIG=configs/kda_300M.json  HS_BATCH_TOKENS="16384 65536"  HS_CPU_DOCS=4  HS_LIMIT=
#   REF_LIMIT=50        documents per task (hellaswag + arc_easy rc_5shot) for the reference
# $OUT (at most 8 files): summary.txt build.log test.log hellaswag_timing.txt hellaswag.log
# reference.log reference.jsonl reference_gpu.jsonl.
set -u
START=$(date +%s)
LIMIT=${KDA_LIMIT:-295}
budget() { # budget WANTED: min(WANTED, seconds left - 5), at least 1
    local left=$((LIMIT - ($(date +%s) - START) - 5))
    [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"
}
elapsed() { echo $(($(date +%s) - START)); }
OUT=${OUT:-/tmp/kda-out}
DATA=${DATA:-bench/eval/data}
KDA_BIN=${KDA_BIN:-}
DEVICE=${DEVICE:-cuda}
STAGES=${STAGES:-test hellaswag reference}
HS_CONFIG=${HS_CONFIG:-configs/kda_300M.json}
HS_BATCH_TOKENS=${HS_BATCH_TOKENS:-16384 65536}
HS_CPU_DOCS=${HS_CPU_DOCS:-4}
HS_LIMIT=${HS_LIMIT:-}
REF_LIMIT=${REF_LIMIT:-50}
export FLA_ONE_CONFIG=1 TRITON_CACHE_AUTOTUNING=1 PYTHONUNBUFFERED=1
W=/tmp/kda_device_eval
M=$W/ref
TOK=assets/tokenizers/llama3/tokenizer.json
SUM=$OUT/summary.txt
mkdir -p "$OUT" "$W" "$M"
: > "$SUM"
log() { echo "$*" | tee -a "$SUM"; }
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
ref_summary() { # MARKER: eval_reference.py's verdict lines after MARKER in reference.log
    local lines
    lines=$(sed -n "/^==== $1/,\$p" "$OUT/reference.log" |
        grep -E 'requests: max|acc reference|^(PASS|FAIL)')
    [ -n "$lines" ] || lines=$(sed -n "/^==== $1/,\$p" "$OUT/reference.log" | tail -3)
    echo "$lines" | tee -a "$SUM"
}

# shellcheck source=bench/train_throughput/gpu_env.sh
source bench/train_throughput/gpu_env.sh
{
    date -u
    if [ "$DEVICE" = cuda ]; then kda_gpu_env && echo "deps: ok"; fi
} > "$OUT/build.log" 2>&1

# 0. FLA from the carried wheels, and a background Triton warm-up: FLA's forward kernels for the
#    reference model's shapes compile while kda.c builds (cache in ~/.triton, reused by step 3).
FLA_OK=0
if has reference && kda_fla_env 2>> "$OUT/build.log"; then FLA_OK=1; fi
kda_env_info 2>&1 | tee -a "$OUT/build.log" "$SUM"
export PYTHONPATH=tools/reference${PYTHONPATH:+:$PYTHONPATH}
python3 - configs/tiny.json "$M/cfg.json" << 'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["vocab_size"] = 128256  # the Llama-3 tokenizer's ids
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
WARM_PID=""
REF_OK=0
if [ $FLA_OK = 1 ]; then
    timeout 150 python3 - "$M/cfg.json" > "$W/warmup.log" 2>&1 << 'PY' &
import json, sys, time
import fla_patch  # noqa: F401  (FLA_ONE_CONFIG=1 before fla)
import torch
import fla  # noqa: F401
from fla.models import KDAConfig, KDAForCausalLM
fla_patch.tie_fix()
cfg = json.load(open(sys.argv[1]))
cfg.pop("model_type", None)
model = KDAForCausalLM(KDAConfig(**cfg)).float().cuda().eval()
for T in (100, 128, 333, 640, 1100):  # T % 16 == 0 and != 0: both Triton specializations
    t0 = time.time()
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.randint(0, cfg["vocab_size"], (1, T)).cuda()).logits.float(), -1)
    torch.cuda.synchronize()
    print(f"warm-up T={T}: {time.time() - t0:.1f} s, finite {bool(torch.isfinite(lp).all())}")
PY
    WARM_PID=$!
fi

# 1. Build (as bench/kda_kernel/device_run.sh: build-gpu, deps from .devdeps).
TEST_BIN=""
if [ -z "$KDA_BIN" ]; then
    t0=$(date +%s)
    # shellcheck disable=SC2016
    if timeout "$(budget 150)" bash -c 'source bench/train_throughput/gpu_env.sh
            kda_gpu_build "$1" build-gpu/kda build-gpu/kda_test' _ "$W/make.log"; then
        log "build: ok in $(($(date +%s) - t0)) s"
    else
        log "build: FAILED after $(($(date +%s) - t0)) s"
        grep -E 'error|Error' "$W/make.log" | head -5 | tee -a "$SUM"
    fi
    cat "$W/make.log" >> "$OUT/build.log"
    KDA_BIN=build-gpu/kda
fi
[ -x "$(dirname "$KDA_BIN")/kda_test" ] && TEST_BIN=$(dirname "$KDA_BIN")/kda_test
if [ ! -x "$KDA_BIN" ]; then
    log "no kda binary: stop (total $(elapsed) s)"
    exit 1
fi

# 2. GPU eval tests.
if has test; then
    if [ -n "$TEST_BIN" ]; then
        t0=$(date +%s)
        timeout "$(budget 40)" "$TEST_BIN" gpu_eval > "$OUT/test.log" 2>&1
        log "tests gpu_eval: rc=$? in $(($(date +%s) - t0)) s"
        grep -E '^(ok|FAIL) |test_gpu_eval\.c:[0-9]+:|^    ' "$OUT/test.log" | head -24 | tee -a "$SUM"
    else
        log "tests gpu_eval: no kda_test binary"
    fi
fi

# 3. FLA reference on a small model (configs/tiny.json, Llama-3 vocabulary, random init).
if has reference; then
    log ""
    t0=$(date +%s)
    RL=$OUT/reference.log
    : > "$RL"
    ref_prep() {
        "$KDA_BIN" tokenize --tokenizer $TOK --input assets/text/moby_dick.txt \
            --output-prefix "$M/text" --quiet || return 1
        printf 'model: %s\ntrain_data_path: [%s]\nvalid_data_path: null\nsplit: "100,0,0"\nseq_length: 64\ntrain_iters: 1\nglobal_batch_size: 1\nmicro_batch_size: 1\nlr: 0.0\nmin_lr: 0.0\nsave: %s\neval_interval: 0\neval_iters: 0\ndevice: cpu\n' \
            "$M/cfg.json" "$M/text" "$M/ckpt" > "$M/init.yaml"
        rm -rf "$M/ckpt" "$M/model"
        "$KDA_BIN" train --config "$M/init.yaml" --quiet --no-progress || return 1
        "$KDA_BIN" export --checkpoint "$M/ckpt" --output "$M/model" --dtype fp32 --tokenizer $TOK ||
            return 1
        "$KDA_BIN" eval --model "$M/model" --tasks olmo:hellaswag/rc_5shot,olmo:arc_easy/rc_5shot \
            --data "$DATA" --limit "$REF_LIMIT" --device cpu --dump-requests "$M/requests_cpu.jsonl"
    }
    export -f ref_prep
    export KDA_BIN TOK M DATA REF_LIMIT
    timeout "$(budget 40)" bash -c ref_prep >> "$RL" 2>&1
    rc=$?
    log "reference prep (tiny model, CPU dump of $REF_LIMIT docs per task): rc=$rc in $(($(date +%s) - t0)) s"
    if [ $rc = 0 ] && [ $FLA_OK = 1 ]; then
        if [ -n "$WARM_PID" ]; then
            n=$(budget 60) # the warm-up's kernels are the reference's: wait for it, a bounded time
            while [ "$n" -gt 0 ] && kill -0 "$WARM_PID" 2> /dev/null; do
                sleep 1
                n=$((n - 1))
            done
            echo "==== Triton warm-up (at $(elapsed) s: $(kill -0 "$WARM_PID" 2> /dev/null &&
                echo 'still running' || echo 'done'))" >> "$RL"
            cat "$W/warmup.log" >> "$RL"
        fi
        t1=$(date +%s)
        echo "==== eval_reference.py, CPU dump" >> "$RL"
        timeout "$(budget 120)" python3 tools/reference/eval_reference.py --model "$M/model" \
            --requests "$M/requests_cpu.jsonl" --out "$OUT/reference.jsonl" --bos \
            --max-length 2048 >> "$RL" 2>&1
        rc=$?
        V=$([ $rc = 0 ] && echo PASS || echo FAIL)
        [ $rc = 124 ] && V="FAIL (timed out)"
        [ $rc = 124 ] || REF_OK=1
        log "FLA reference vs kda CPU (fp32): $V (rc=$rc, $(($(date +%s) - t1)) s)"
        ref_summary "eval_reference.py, CPU dump"
    elif [ $FLA_OK = 0 ]; then
        log "FLA reference: not run (cannot import torch + fla: carry .whl)"
    else
        log "FLA reference: not run (prep failed)"
        tail -5 "$RL" | tee -a "$SUM"
    fi
fi

# 4. HellaSwag timing (its own files in $W/hs; two of them come back).
if has hellaswag; then
    t0=$(date +%s)
    OUT=$W/hs KDA_BIN=$KDA_BIN CONFIG=$HS_CONFIG BATCH_TOKENS=$HS_BATCH_TOKENS \
        CPU_DOCS=$HS_CPU_DOCS DEVICE=$DEVICE LIMIT=$HS_LIMIT \
        timeout "$(budget 110)" bash bench/eval/hellaswag_gpu.sh "$DATA" > "$W/hellaswag.out" 2>&1
    rc=$?
    log ""
    log "hellaswag_gpu.sh: rc=$rc in $(($(date +%s) - t0)) s$([ $rc = 124 ] && echo ' (timed out)')"
    cp "$W/hs/hellaswag_timing.txt" "$OUT/" 2> /dev/null && cat "$OUT/hellaswag_timing.txt" >> "$SUM"
    grep -E 'exit|requests in|\| |max \|dll' "$W/hs/hellaswag_timing.txt" 2> /dev/null
    for f in "$W/hellaswag.out" "$W"/hs/*.log "$W"/hs/model_info.txt "$W"/hs/results_*.json; do
        [ -f "$f" ] && { echo "==== $f"; cat "$f"; }
    done > "$OUT/hellaswag.log" 2>&1
fi

# 5. For information: the GPU (bf16) path's dump of the same documents vs FLA (fp32), when time
#    is left.
if [ "$REF_OK" = 1 ] && [ "$DEVICE" = cuda ] && [ "$(budget 30)" -ge 30 ]; then
    echo "==== kda eval --device cuda dump" >> "$RL"
    timeout "$(budget 30)" "$KDA_BIN" eval --model "$M/model" \
        --tasks olmo:hellaswag/rc_5shot,olmo:arc_easy/rc_5shot --data "$DATA" \
        --limit "$REF_LIMIT" --device cuda --dump-requests "$M/requests_gpu.jsonl" \
        >> "$RL" 2>&1 &&
        echo "==== eval_reference.py, GPU dump" >> "$RL" &&
        timeout "$(budget 60)" python3 tools/reference/eval_reference.py --model "$M/model" \
            --requests "$M/requests_gpu.jsonl" --out "$OUT/reference_gpu.jsonl" --bos \
            --max-length 2048 --tol 0.05 >> "$RL" 2>&1
    log "info: FLA reference vs kda GPU (bf16, tol 0.05): rc=$?"
    ref_summary "eval_reference.py, GPU dump"
fi
[ -n "$WARM_PID" ] && kill "$WARM_PID" 2> /dev/null
log ""
log "total $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
