#!/bin/bash
# device_multi.sh - the multi-GPU runs of issues 16 (2 H200s) and 17 (8 H200s) in one device call
# each: every number the issues ask for, as one Markdown summary ($OUT/multi.md) and one tarball of
# the logs and JSON ($OUT/multi_logs.tgz). NGPU GPUs (nvidia-smi's count unless set). Stages, in
# order, each bounded by the time left of KDA_LIMIT (default 540 s) and timed ("== stage"):
#
#   env       GPUs, driver, nvcc, torch; `nvidia-smi topo -m` (how the GPUs are linked)
#   build     kda, kda_test, libkda.a (build-gpu, sm_90a) and bench/dist/allreduce_bench.c against
#             it; torch's all-reduce sweep runs on the GPUs meanwhile (the build needs the CPUs
#             only; the sweep's table says so)
#   sweep     all-reduce bus bandwidth, 1 MiB .. 2 GiB (x2), in place, sum: kda.c's own NCCL
#             communicator (fp32, the gradient's dtype; allreduce_bench.c, launched with
#             torchrun's variables) and torch.distributed (fp32, bf16; torch_allreduce.py under
#             torchrun), on all NGPU GPUs
#   single    the one-GPU references, run side by side on separate GPUs: the equality reference
#             (EQ_MB x NGPU micro-batches accumulated on 1 GPU), the speed baselines (mb 16/32/64,
#             no accumulation) and, for 17, the seed shape's per-GPU share on 1 GPU
#   eq        equality: KDA-300M, EQ_STEPS (50) iterations, global batch EQ_MB x NGPU on NGPU GPUs
#             (kda's --nproc-per-node), saving at EQ_SAVE (25); per-step losses (the log's, 7 digits) vs the
#             1-GPU reference within EQ_TOL, consumed_samples identical; then the NGPU-GPU
#             checkpoint of iteration EQ_SAVE resumed on 1 GPU (2 when NGPU >= 8) to EQ_STEPS: its
#             losses must continue both curves within EQ_TOL. Data: the repository's public-domain
#             texts (assets/text) tokenized with the Llama 3 tokenizer, so the loss falls and a
#             wrong slice or a missing reduction shows (random ids keep the loss flat at ln V)
#   seed      (17) the seed recipe's shape: global batch 1024 x 2048, SEED_MB per GPU with
#             accumulation, SEED_STEPS (100; fewer when time is short, said so) on NGPU GPUs:
#             ms/step, tokens/s/GPU, model TFLOP/s, MFU, scaling vs the 1-GPU share, the profile
#             of one step (rank 0), the 4768-iteration wall time, vs the seed's 8x MI300X
#   speed     tokens/s per GPU at mb 16/32/64 on NGPU GPUs (global batch mb x NGPU, no
#             accumulation), plain and ZeRO-1: scaling vs the 1-GPU baselines (bar 0.95 x NGPU),
#             NVML peak memory per GPU, and the per-op profile of one step on rank 0 vs 1 GPU (the
#             growth of its 'unaccounted' row = the all-reduce the backward did not hide)
#   1b        (17) KDA-1B with ZeRO-1 on NGPU GPUs: tokens/s/GPU and memory per GPU at B1_MB, the
#             largest micro-batch that runs without and with --recompute_granularity full
#             (B1_TRY_NONE, B1_TRY_FULL, ascending, stopping at the first failure)
#   faults    kill -9 of one rank mid-step (ranks started without an agent, collective timeout
#             FAULT_TIMEOUT_MIN = 0.75 min): every other rank must exit non-zero within 60 s naming
#             it (the table says whether they saw the death or left at the timeout); SIGTERM to
#             `kda train --nproc-per-node`: one checkpoint, every rank exits 0
#   launch    3 iterations through torchrun --nproc-per-node (the README's form, static
#             rendezvous), torchrun --standalone with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, kda's
#             --nproc-per-node and mpirun (or "not available"); a launcher an earlier stage used
#             with NGPU ranks is cited
# NGPU < 8 runs the stages of 16; NGPU >= 8 (or EXTRA17=1) adds seed and 1b and orders the
# stages env build sweep single eq seed 1b faults speed launch (17's items before the speed grid).
#
# Usage (repository root, on the GPU machine; carry .devdeps):
#   bash bench/dist/device_multi.sh                     # kind nvidia-h200-x2 or nvidia-h200-x8
# CPU smoke test of the script's logic (Gloo CPU ranks, tiny models, byte-level data, small sizes;
# the NCCL sweep runs on Gloo; torch parts say "not available" without torch):
#   DEVICE=cpu NGPU=2 bash bench/dist/device_multi.sh   # (EXTRA17=1 adds 17's stages)
# Environment: OUT (default /tmp/kda-out) gets multi.md and multi_logs.tgz; W (/tmp/kda_multi) the
# work files; KDA_LIMIT=540; STAGES="..." runs a subset; every size/step knob below can be set.
set -u
LIMIT=${KDA_LIMIT:-540}
W=${W:-/tmp/kda_multi}
DEVICE=${DEVICE:-cuda}
# shellcheck source=bench/dist/dist_env.sh
source bench/dist/dist_env.sh
rm -rf "$W/res" "$W"/*.log "$W"/*.json "$W"/*.jsonl "$W"/*.cmd "$W"/ck_*
mkdir -p "$W/res"

if [ "$DEVICE" = cuda ]; then
    NGPU=${NGPU:-$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')}
    [ "$NGPU" -ge 1 ] 2> /dev/null || { echo "device_multi: no GPU (nvidia-smi -L)"; exit 1; }
    MODEL=${MODEL:-configs/kda_300M.json} MODEL_1B=${MODEL_1B:-configs/kda_1B.json}
    SEQ=${SEQ:-2048} VOCAB=${VOCAB:-128256}
    DEV_ARGS=(--device cuda)
    SPEED_MBS=${SPEED_MBS:-$([ "$NGPU" -ge 8 ] && echo 16 64 || echo 16 32 64)} SPEED_WARMUP=${SPEED_WARMUP:-3} SPEED_STEPS=${SPEED_STEPS:-7}
    EQ_MB=${EQ_MB:-$((NGPU >= 16 ? 1 : 16 / NGPU))} EQ_STEPS=${EQ_STEPS:-50} EQ_SAVE=${EQ_SAVE:-25}
    FAULT_MB=${FAULT_MB:-4}
    SEED_GBS=${SEED_GBS:-1024} SEED_MB=${SEED_MB:-64} SEED_STEPS=${SEED_STEPS:-100}
    B1_MB=${B1_MB:-16} B1_TRY_NONE=${B1_TRY_NONE:-32 34} B1_TRY_FULL=${B1_TRY_FULL:-96 128 160}
    SLOTS=${SLOTS:-$NGPU} # one-GPU jobs side by side, one per GPU
    SWEEP_ARGS=(--min-bytes 1M --max-bytes 2G --factor 2)
    ENGINE=nccl
else
    NGPU=${NGPU:-2}
    MODEL=${MODEL:-configs/tiny.json} MODEL_1B=${MODEL_1B:-configs/tiny_gva.json}
    SEQ=${SEQ:-64} VOCAB=${VOCAB:-256}
    DEV_ARGS=(--device cpu --threads 1)
    export OMP_NUM_THREADS=1
    SPEED_MBS=${SPEED_MBS:-2 4} SPEED_WARMUP=${SPEED_WARMUP:-2} SPEED_STEPS=${SPEED_STEPS:-3}
    EQ_MB=${EQ_MB:-2} EQ_STEPS=${EQ_STEPS:-10} EQ_SAVE=${EQ_SAVE:-5}
    FAULT_MB=${FAULT_MB:-2}
    SEED_GBS=${SEED_GBS:-16} SEED_MB=${SEED_MB:-2} SEED_STEPS=${SEED_STEPS:-6}
    B1_MB=${B1_MB:-2} B1_TRY_NONE=${B1_TRY_NONE:-4} B1_TRY_FULL=${B1_TRY_FULL:-8}
    SLOTS=${SLOTS:-1} # 2 shared cores: one job at a time
    SWEEP_ARGS=(--min-bytes 1M --max-bytes 16M --factor 4)
    ENGINE=gloo
fi
EQ_TOL=${EQ_TOL:-5e-3}
# the collective timeout of the kill -9 run: a survivor that does not see the death leaves at it
# (the message then still names the dead rank), one that sees it leaves at once
FAULT_TIMEOUT_MIN=${FAULT_TIMEOUT_MIN:-0.75}
EXTRA17=${EXTRA17:-$((NGPU >= 8 ? 1 : 0))}
RES_GPUS=$((NGPU >= 8 ? 2 : 1)) # the resume's world
EQ_GBS=$((EQ_MB * NGPU))
SEED_ACC=$((SEED_GBS / (SEED_MB * NGPU)))
[ "$SEED_ACC" -ge 1 ] || SEED_ACC=1
if [ "$EXTRA17" = 1 ]; then
    DEFAULT_STAGES="env build sweep single eq seed 1b faults speed launch"
else
    DEFAULT_STAGES="env build sweep single eq speed faults launch"
fi
STAGES=${STAGES:-$DEFAULT_STAGES}
want() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
RUNCFG=$HERE/bench_300M.yaml
CUR_MODEL=$MODEL
ALL_DEVS=$(seq -s, 0 $((NGPU - 1)))
TORCHRUN=()
if command -v torchrun > /dev/null; then
    TORCHRUN=(torchrun)
elif python3 -c 'import torch' 2> /dev/null; then
    TORCHRUN=(python3 -m torch.distributed.run)
fi
MPI_ARGS=()
[ "$(id -u)" = 0 ] && MPI_ARGS+=(--allow-run-as-root)
[ "$DEVICE" = cpu ] && MPI_ARGS+=(--oversubscribe)
echo "device_multi: DEVICE=$DEVICE NGPU=$NGPU EXTRA17=$EXTRA17 LIMIT=$LIMIT s; stages: $STAGES"
echo "  model $MODEL seq $SEQ; eq: $EQ_MB x $NGPU, $EQ_STEPS steps, save at $EQ_SAVE, resume on" \
    "$RES_GPUS, tol $EQ_TOL; speed mbs '$SPEED_MBS' ($SPEED_WARMUP + $SPEED_STEPS steps)"
[ "$EXTRA17" = 1 ] && echo "  seed: gbs $SEED_GBS = $SEED_MB x $SEED_ACC x $NGPU, $SEED_STEPS" \
    "steps; 1B: mb $B1_MB, tries none '$B1_TRY_NONE' full '$B1_TRY_FULL'"

skip() { # NAME WHY: a row of the report's "not run" list, and a line now
    echo "  $1: skipped: $2"
    printf '{"kind": "skip", "name": "%s", "skipped": "%s"}\n' "$1" "$2" > "$W/res/skip_$1.json"
}

# train NAME LAUNCH NPROC DEVS TIMEOUT ARGS...: `kda train` on RUNCFG, CUR_MODEL, SEQ, DEV_ARGS and
# ARGS, launched LAUNCH (single | kda: --nproc-per-node | torchrun | torchrun_sa | mpirun | env:
# multi.py launch, rank r's output in $W/NAME.rank<r>.log), NVML memory of DEVS sampled; rank 0's
# output in $W/NAME.log. Returns the exit status (124: killed at TIMEOUT).
# torchrun: torch's elastic agent serves its own TCP store on MASTER_PORT (the static rendezvous
# always; c10d unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, torch >= 2.4) and says so with
# TORCHELASTIC_USE_AGENT_STORE=True; kda's rank 0 then serves its rendezvous on MASTER_PORT + 1
# (src/dist/dist.h, since 2026-12-03; run under torchrun on CPU ranks 2026-12-04). The launch
# stage tries both forms, the other stages use kda's launcher or plain variables (env).
train() {
    local name=$1 launch=$2 n=$3 devs=$4 t=$5 pre=()
    shift 5
    case $launch in
    single) pre=("$KDA" train) ;;
    kda) pre=("$KDA" train --nproc-per-node "$n") ;;
    torchrun) # the README's form: the static rendezvous, whose agent store holds MASTER_PORT
        pre=("${TORCHRUN[@]}" --nproc-per-node "$n" --master-port $((20000 + RANDOM % 20000))
            --no-python "$KDA" train) ;;
    torchrun_sa) # c10d rendezvous with its store not shared: MASTER_PORT is a free port
        pre=(env TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "${TORCHRUN[@]}" --standalone
            --nproc-per-node "$n" --no-python "$KDA" train) ;;
    mpirun) pre=(mpirun "${MPI_ARGS[@]}" -np "$n" "$KDA" train) ;;
    env) pre=(python3 "$DIST/multi.py" launch --nproc "$n" --log-prefix "$W/$name" -- "$KDA" train) ;;
    esac
    local args=(--config "$RUNCFG" --model "$CUR_MODEL" --seq_length "$SEQ" --no-progress
        --distributed_timeout_minutes 2 "${DEV_ARGS[@]}" "$@")
    echo "${pre[*]} ${args[*]}" > "$W/$name.cmd"
    echo "$launch" > "$W/$name.launch"
    python3 $DIST/multi.py mem --out "$W/$name.mem.json" --devices "$devs" --timeout "$t" -- \
        "${pre[@]}" "${args[@]}" > "$W/$name.log" 2>&1
}

# record NAME RC STAGE GPUS MB WARMUP [multi.py log options...]: the run's JSON line
record() {
    local name=$1 rc=$2 stage=$3 gpus=$4 mb=$5 warm=$6
    shift 6
    python3 $DIST/multi.py log "$W/$name.log" --name "$name" --stage "$stage" --gpus "$gpus" \
        --mb "$mb" --seq "$SEQ" --warmup "$warm" --mem "$W/$name.mem.json" --rc "$rc" \
        --launcher "$(cat "$W/$name.launch" 2> /dev/null)" "$@" > "$W/res/$name.json"
    python3 - "$W/res/$name.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t = r.get("tok_s_gpu_median")
print(f"  {r['name']}: rc={r['rc']} iterations={r['iters_logged']}"
      + (f" ms/step={r['ms_per_step']:.1f}" if r.get("ms_per_step") else "")
      + (f" tokens/s/GPU(log)={t:,.0f}" if t else "")
      + (f" mem={r['mem_peak_mib']}" if any(r.get("mem_peak_mib") or []) else "")
      + (f"\n    error: {r['error']}" if r.get("error") else ""))
EOF
}

json_get() { # FILE KEY -> value or empty
    python3 -c 'import json,sys
try: v = json.load(open(sys.argv[1])).get(sys.argv[2])
except Exception: v = None
print("" if v is None else v)' "$1" "$2"
}

# ---- env -------------------------------------------------------------------------------------
stage env
if [ "$DEVICE" = cuda ]; then
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
    nvidia-smi topo -m 2>&1 | tee "$W/topo.txt"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda devices", torch.cuda.device_count(), "NCCL", torch.cuda.nccl.version())' 2>&1 | tail -1
else
    echo "topology: not available (DEVICE=cpu: $NGPU Gloo CPU ranks)" | tee "$W/topo.txt"
fi
echo "torchrun: ${TORCHRUN[*]:-not available}; mpirun: $(command -v mpirun || echo not available)"
env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_)' | sort

# ---- build (+ torch's sweep on the GPUs meanwhile) --------------------------------------------
stage build
TORCH_PID=""
torch_sweep() {
    if [ ${#TORCHRUN[@]} = 0 ]; then
        echo "torch sweep: not available (no torch)" > "$W/torch_sweep.log"
        return 0
    fi
    local backend=nccl
    [ "$DEVICE" = cpu ] && backend=gloo
    timeout -k 10 "$(budget 150)" "${TORCHRUN[@]}" --standalone --nproc-per-node "$NGPU" \
        $DIST/torch_allreduce.py --backend "$backend" "${SWEEP_ARGS[@]}" \
        > "$W/torch_sweep.jsonl" 2> "$W/torch_sweep.log"
    echo "torch sweep: rc=$?" >> "$W/torch_sweep.log"
}
if want sweep && [ "$DEVICE" = cuda ]; then
    torch_sweep &
    TORCH_PID=$!
fi
if want build || [ ! -x "$KDA" ]; then
    { dist_setup "$W/build.log" kda kda_test libkda.a && [ -x "$KDA" ]; } || {
        echo "device_multi: no kda binary: stopping"
        [ -n "$TORCH_PID" ] && wait "$TORCH_PID"
        tar czf "$OUT/multi_logs.tgz" -C "$W" --exclude='*.bin' --exclude='*.idx' --exclude='ck_*' . 2> /dev/null
        exit 1
    }
else
    [ "$DEVICE" = cuda ] && { kda_gpu_env || exit 1; }
fi
HARNESS=$W/allreduce_bench
if dist_build_harness $DIST/allreduce_bench.c "$HARNESS" > "$W/harness_build.log" 2>&1; then
    echo "allreduce_bench: built"
else
    echo "allreduce_bench: build FAILED"
    head -20 "$W/harness_build.log"
    HARNESS=""
fi
PARAMS=$("$KDA" info --model "$MODEL" 2> /dev/null | sed -n 's/^parameters: //p')
echo "parameters of $MODEL: ${PARAMS:-?}"

# data: random ids (speed, seed, 1b, faults) and text (equality; the CPU build uses bytes of it)
RND=$W/random
TEXT=$W/text
if [ "$DEVICE" = cuda ]; then
    dist_random_data "$RND" 4096 $((SEQ + 1)) "$VOCAB"
    "$KDA" tokenize --tokenizer assets/tokenizers/llama3 --input assets/text/moby_dick.txt \
        assets/text/web_bible.txt --output-prefix "$TEXT" --append-eod --workers "$(nproc)" \
        --quiet > "$W/tokenize.log" 2>&1 || {
        echo "tokenize failed: $(tail -1 "$W/tokenize.log"); equality on random ids instead"
        TEXT=$RND
    }
    "$KDA" dataset-info "$TEXT" 2>&1 | head -3
else
    python3 $DIST/multi.py bytes-data "$RND" assets/text/moby_dick.txt --length $((SEQ + 1)) \
        --min-sequences 2048 2>&1 | tail -1
    TEXT=$RND
fi

# ---- sweep -------------------------------------------------------------------------------------
: > "$W/sweep.jsonl"
if want sweep; then
    stage sweep
    if [ -n "$HARNESS" ]; then
        # plain torchrun variables (multi.py launch, no agent): the harness forms its world with
        # kda's rendezvous (dist.h), so no agent store competes for MASTER_PORT (see train)
        timeout -k 10 "$(budget 120)" python3 $DIST/multi.py launch --nproc "$NGPU" \
            --log-prefix "$W/kda_sweep" -- "$HARNESS" --engine "$ENGINE" "${SWEEP_ARGS[@]}" \
            > "$W/kda_sweep.jsonl" 2> "$W/kda_sweep.log"
        echo "kda sweep ($ENGINE): rc=$? ($(grep -c '^{' "$W/kda_sweep.jsonl") sizes)"
        grep -v '^{' "$W/kda_sweep.log" | head -5
        grep '^{' "$W/kda_sweep.jsonl" >> "$W/sweep.jsonl"
    else
        skip sweep_kda "allreduce_bench did not build"
    fi
    if [ -n "$TORCH_PID" ]; then
        wait "$TORCH_PID"
    elif [ "$DEVICE" = cpu ]; then
        torch_sweep
    fi
    tail -2 "$W/torch_sweep.log"
    grep -q '^{' "$W/torch_sweep.jsonl" 2> /dev/null && grep '^{' "$W/torch_sweep.jsonl" >> "$W/sweep.jsonl"
    [ ${#TORCHRUN[@]} = 0 ] && skip sweep_torch "torch not available (DEVICE=$DEVICE)"
    python3 - "$W/sweep.jsonl" <<'EOF'
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.startswith("{")]
for r in rows:
    if r["bytes"] in (1 << 20, 1 << 26, 1 << 30, 2 << 30) or r["bytes"] == max(x["bytes"] for x in rows):
        print(f"  {r['impl']:5} {r['dtype']} {r['bytes']:>11,} B: {r['ms']:9.3f} ms, busbw {r['busbw_GBps']:7.1f} GB/s")
EOF
fi

# ---- single: the one-GPU references side by side ----------------------------------------------
job_eq1() { # GPU
    local rc
    CUDA_VISIBLE_DEVICES=$1 train eq_1gpu single 1 "$1" "$(budget 240)" \
        --micro_batch_size "$EQ_MB" --global_batch_size "$EQ_GBS" --train_iters "$EQ_STEPS" \
        --train_data_path "$TEXT"
    rc=$?
    record eq_1gpu $rc eq 1 "$EQ_MB" 1 --extra accum="$NGPU" gbs="$EQ_GBS"
}
job_speed1() { # GPU MB
    local rc
    CUDA_VISIBLE_DEVICES=$1 train "speed_1gpu_mb$2" single 1 "$1" "$(budget 200)" \
        --micro_batch_size "$2" --global_batch_size "$2" \
        --train_iters $((SPEED_WARMUP + SPEED_STEPS)) --train_data_path "$RND" \
        --profile "$SPEED_WARMUP"
    rc=$?
    record "speed_1gpu_mb$2" $rc speed 1 "$2" "$SPEED_WARMUP" --extra params="${PARAMS:-0}"
}
job_seed1() { # GPU
    local rc
    CUDA_VISIBLE_DEVICES=$1 train seed_1gpu single 1 "$1" "$(budget 200)" \
        --micro_batch_size "$SEED_MB" --global_batch_size $((SEED_MB * SEED_ACC)) \
        --train_iters 5 --train_data_path "$RND" --profile 2
    rc=$?
    record seed_1gpu $rc seed 1 "$SEED_MB" 2 --extra accum="$SEED_ACC" \
        gbs=$((SEED_MB * SEED_ACC))
}
if want single; then
    stage single
    JOBS_LIST=()
    want eq && JOBS_LIST+=("job_eq1")
    [ "$EXTRA17" = 1 ] && want seed && JOBS_LIST+=("job_seed1")
    if want speed; then
        for mb in $SPEED_MBS; do JOBS_LIST=("job_speed1 $mb" "${JOBS_LIST[@]}"); done
    fi
    QUEUE=()
    for i in "${!JOBS_LIST[@]}"; do
        s=$((i % SLOTS))
        QUEUE[s]="${QUEUE[s]:-}${JOBS_LIST[i]};"
    done
    PIDS=()
    for s in "${!QUEUE[@]}"; do
        (
            IFS=';' read -ra items <<< "${QUEUE[s]}"
            for j in "${items[@]}"; do
                [ -z "$j" ] && continue
                read -r fn arg <<< "$j"
                echo "  [gpu $s] $j"
                # shellcheck disable=SC2086 # arg: empty or one word
                $fn "$s" $arg
            done
        ) &
        PIDS+=($!)
    done
    for p in "${PIDS[@]}"; do wait "$p"; done
fi

# ---- eq: NGPU GPUs, then the resume on RES_GPUS -------------------------------------------------
if want eq; then
    stage eq
    EQ_LAUNCH=kda
    rm -rf "$W/ck_eqn"
    train eq_ngpu $EQ_LAUNCH "$NGPU" "$ALL_DEVS" "$(budget 200)" \
        --micro_batch_size "$EQ_MB" --global_batch_size "$EQ_GBS" --train_iters "$EQ_STEPS" \
        --train_data_path "$TEXT" --save "$W/ck_eqn" --save_interval "$EQ_SAVE"
    rc=$?
    record eq_ngpu $rc eq "$NGPU" "$EQ_MB" 1 --extra accum=1 gbs="$EQ_GBS"
    CK=$W/ck_eqn/$(printf 'iter_%07d' "$EQ_SAVE")
    if [ -d "$CK" ]; then
        RL=single
        [ "$RES_GPUS" -gt 1 ] && RL=kda
        train eq_resume $RL "$RES_GPUS" "$(seq -s, 0 $((RES_GPUS - 1)))" "$(budget 200)" \
            --micro_batch_size "$EQ_MB" --global_batch_size "$EQ_GBS" --train_iters "$EQ_STEPS" \
            --train_data_path "$TEXT" --load "$CK"
        rc=$?
        record eq_resume $rc eq "$RES_GPUS" "$EQ_MB" 1 --extra resumed_at="$EQ_SAVE" \
            accum=$((NGPU / RES_GPUS)) gbs="$EQ_GBS"
        grep -h "resumed from" "$W/eq_resume.log" | head -1
    else
        skip eq_resume "no checkpoint $CK from the $NGPU-GPU run"
    fi
    rm -rf "$W"/ck_eqn/iter_*
fi

# ---- seed (17) ----------------------------------------------------------------------------------
if [ "$EXTRA17" = 1 ] && want seed; then
    stage seed
    est=$(json_get "$W/res/seed_1gpu.json" ms_per_step)
    est=${est%.*}
    if ! [ "${est:-0}" -gt 0 ] 2> /dev/null; then
        est=200
        [ "$DEVICE" = cuda ] && est=1400 # 8 x 64 x 2048 tokens at ~195k tokens/s per GPU
    fi
    # keep ~170 s for 1b and faults (the speed grid takes what is left after them)
    room=$(($(left) - 170 - 30))
    steps=$SEED_STEPS
    fit=$((room * 1000 / (est > 0 ? est : 1)))
    [ "$fit" -lt "$steps" ] && steps=$fit
    if [ "$steps" -ge 5 ]; then
        [ "$steps" -lt "$SEED_STEPS" ] && echo "  seed: $steps steps instead of $SEED_STEPS (time left $(left) s, ~$est ms/step)"
        train seed_ngpu env "$NGPU" "$ALL_DEVS" "$(budget $((steps * est / 1000 + 90)))" \
            --micro_batch_size "$SEED_MB" --global_batch_size "$SEED_GBS" --train_iters "$steps" \
            --train_data_path "$RND" --profile 2
        rc=$?
        record seed_ngpu $rc seed "$NGPU" "$SEED_MB" 2 --extra accum="$SEED_ACC" gbs="$SEED_GBS" \
            steps_asked="$SEED_STEPS"
    else
        skip seed_ngpu "too little time left ($(left) s)"
    fi
fi

# ---- 1b (17): KDA-1B with ZeRO-1 ----------------------------------------------------------------
b1_run() { # NAME MB RECOMPUTE ITERS WARMUP -> rc
    local rc
    if [ "$(left)" -lt 60 ]; then
        skip "$1" "too little time left ($(left) s)"
        return 99
    fi
    CUR_MODEL=$MODEL_1B train "$1" kda "$NGPU" "$ALL_DEVS" "$(budget 120)" \
        --micro_batch_size "$2" --global_batch_size $(($2 * NGPU)) --train_iters "$4" \
        --train_data_path "$RND" --use_distributed_optimizer true --recompute_granularity "$3"
    rc=$?
    record "$1" $rc 1b "$NGPU" "$2" "$5" --extra recompute="$3"
    return $rc
}
if [ "$EXTRA17" = 1 ] && want 1b; then
    stage 1b
    b1_run "b1_zero1_mb$B1_MB" "$B1_MB" none 6 2
    grep -h "ZeRO-1" "$W/b1_zero1_mb$B1_MB.log" | head -1
    for mb in $B1_TRY_NONE; do b1_run "b1_none_mb$mb" "$mb" none 2 1 || break; done
    for mb in $B1_TRY_FULL; do b1_run "b1_full_mb$mb" "$mb" full 2 1 || break; done
fi

# ---- speed: NGPU GPUs, plain and ZeRO-1 ----------------------------------------------------------
if want speed; then
    stage speed
    for mb in $SPEED_MBS; do
        for z in ngpu zero1; do
            name=speed_${z}_mb$mb
            if [ "$(left)" -lt 45 ]; then
                skip "$name" "too little time left ($(left) s)"
                continue
            fi
            extra=()
            [ $z = zero1 ] && extra=(--use_distributed_optimizer true)
            train "$name" env "$NGPU" "$ALL_DEVS" "$(budget 150)" \
                --micro_batch_size "$mb" --global_batch_size $((mb * NGPU)) \
                --train_iters $((SPEED_WARMUP + SPEED_STEPS)) --train_data_path "$RND" \
                --profile "$SPEED_WARMUP" "${extra[@]}"
            rc=$?
            record "$name" $rc speed "$NGPU" "$mb" "$SPEED_WARMUP" --extra params="${PARAMS:-0}" \
                zero1="$([ $z = zero1 ] && echo true || echo false)"
        done
    done
    grep -h "ZeRO-1" "$W"/speed_zero1_mb*.log 2> /dev/null | head -1
fi

# ---- faults --------------------------------------------------------------------------------------
wait_iter() { # LOG N SECONDS: until LOG has iteration N's line
    local t_end=$(($(date +%s) + $3))
    while [ "$(date +%s)" -lt "$t_end" ]; do
        grep -qE "iteration +$2/" "$1" 2> /dev/null && return 0
        sleep 0.2
    done
    return 1
}
if want faults; then
    stage faults
    if [ "$(left)" -lt 50 ]; then
        skip fault_kill9 "too little time left ($(left) s)"
    else
        # kill -9 of the last rank mid-step; ranks started without an agent (no torchrun to
        # tear the others down: what they do is the trainer's own fault handling)
        victim=$((NGPU - 1))
        port=$((20000 + RANDOM % 20000))
        dist_launch_env "$NGPU" "$port" "$W/fault_kill" "$KDA" train --config "$RUNCFG" \
            --model "$MODEL" --seq_length "$SEQ" --no-progress \
            --distributed_timeout_minutes "$FAULT_TIMEOUT_MIN" \
            "${DEV_ARGS[@]}" --micro_batch_size "$FAULT_MB" \
            --global_batch_size $((FAULT_MB * NGPU)) --train_iters 100000 --train_data_path "$RND"
        pids=("${RANK_PIDS[@]}")
        if wait_iter "$W/fault_kill.rank0.log" 3 "$(budget 90)"; then
            sleep 0.1 # inside the next step
            kill -9 "${pids[victim]}"
            t0=$(date +%s.%N)
            t_end=$(($(date +%s) + 75))
            while [ "$(date +%s)" -lt "$t_end" ]; do
                alive=0
                for r in "${!pids[@]}"; do
                    [ "$r" = "$victim" ] && continue
                    kill -0 "${pids[r]}" 2> /dev/null && alive=1
                done
                [ $alive = 0 ] && break
                sleep 0.1
            done
            secs=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
            rcs=""
            named=0
            for r in "${!pids[@]}"; do
                [ "$r" = "$victim" ] && continue
                if kill -0 "${pids[r]}" 2> /dev/null; then
                    kill -9 "${pids[r]}" 2> /dev/null
                    wait "${pids[r]}" 2> /dev/null
                    rcs="$rcs hung"
                    secs=999
                else
                    wait "${pids[r]}"
                    rcs="$rcs $?"
                fi
                grep -qE "rank $victim( |\b).*(gone|killed|exited|crashed)" "$W/fault_kill.rank$r.log" &&
                    named=$((named + 1))
            done
            wait "${pids[victim]}" 2> /dev/null
            rcs=${rcs# }
            echo "  kill -9 rank $victim: survivors' exit statuses '$rcs' after $secs s; $named of" \
                "$((NGPU - 1)) name rank $victim"
            [ "${rcs/hung/}" = "$rcs" ] || rcs=${rcs//hung/-1}
            python3 $DIST/multi.py fault --name fault_kill9 --log "$W/fault_kill.rank0.log" \
                --want "[^\n]*rank ${victim}[^\n]*(gone|killed|exited|crashed)[^\n]*" --rcs "$rcs" \
                --seconds "$secs" --bound 60 --expect nonzero \
                --extra what="\"kill -9 of rank $victim mid-step ($NGPU ranks; collective timeout $FAULT_TIMEOUT_MIN min)\"" \
                named="$named" survivors=$((NGPU - 1)) \
                timeout_s="$(python3 -c "print(60 * $FAULT_TIMEOUT_MIN)")" > "$W/res/fault_kill9.json"
            grep -h -m1 -E "rank $victim.*(gone|killed|exited|crashed)" "$W/fault_kill.rank0.log"
        else
            echo "  kill -9: rank 0 never reached iteration 3"
            for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null; done
            wait 2> /dev/null
            skip fault_kill9 "rank 0 never reached iteration 3 ($(tail -1 "$W/fault_kill.rank0.log"))"
        fi
    fi
    if [ "$(left)" -lt 50 ]; then
        skip fault_sigterm "too little time left ($(left) s)"
    else
        # SIGTERM to kda's launcher: forwarded to every rank; the same last iteration, one
        # checkpoint, everyone exits 0
        rm -rf "$W/ck_term"
        "$KDA" train --nproc-per-node "$NGPU" --config "$RUNCFG" --model "$MODEL" \
            --seq_length "$SEQ" --no-progress --distributed_timeout_minutes 2 "${DEV_ARGS[@]}" \
            --micro_batch_size "$FAULT_MB" --global_batch_size $((FAULT_MB * NGPU)) \
            --train_iters 100000 --train_data_path "$RND" --save "$W/ck_term" \
            --save_interval 0 > "$W/fault_term.log" 2>&1 &
        lp=$!
        if wait_iter "$W/fault_term.log" 3 "$(budget 90)"; then
            kill -TERM "$lp"
            t0=$(date +%s.%N)
            t_end=$(($(date +%s) + 120))
            while kill -0 "$lp" 2> /dev/null && [ "$(date +%s)" -lt "$t_end" ]; do sleep 0.1; done
            secs=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
            if kill -0 "$lp" 2> /dev/null; then
                kill -9 "$lp"
                rc=-1
            else
                wait "$lp"
                rc=$?
            fi
            ncks=$(find "$W/ck_term" -maxdepth 1 -name 'iter_*' -type d 2> /dev/null | wc -l)
            echo "  SIGTERM to the launcher: rc=$rc after $secs s, $ncks checkpoint(s)," \
                "latest: $(cat "$W/ck_term/latest" 2> /dev/null || echo none)"
            python3 $DIST/multi.py fault --name fault_sigterm --log "$W/fault_term.log" \
                --want "stopped at iteration [0-9]+[^\n]*" --rcs "$rc" --seconds "$secs" \
                --bound 60 --expect zero --extra \
                what="\"SIGTERM to kda train --nproc-per-node $NGPU\"" checkpoints="$ncks" \
                > "$W/res/fault_sigterm.json"
            [ "$ncks" = 1 ] || python3 - "$W/res/fault_sigterm.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r["pass"] = False
r["message"] = (r.get("message") or "") + f" / {r.get('checkpoints')} checkpoints, expected 1"
json.dump(r, open(sys.argv[1], "w"))
EOF
        else
            kill -9 "$lp" 2> /dev/null
            skip fault_sigterm "the launcher's rank 0 never reached iteration 3"
        fi
        rm -rf "$W"/ck_term/iter_*
    fi
fi

# ---- launch: torchrun, kda, mpirun --------------------------------------------------------------
# A launcher another stage already ran NGPU ranks with (rc 0) is cited, not run again; the others
# run 3 iterations here.
if want launch; then
    stage launch
    for l in torchrun torchrun_sa kda mpirun; do
        name=launch_$l
        case $l in
        torchrun*) [ ${#TORCHRUN[@]} -gt 0 ] || { skip "$name" "torchrun: not available"; continue; } ;;
        mpirun) command -v mpirun > /dev/null || { skip "$name" "mpirun: not available"; continue; } ;;
        esac
        prior=$(python3 - "$W/res" "$l" "$NGPU" << 'EOF'
import glob, json, sys
for p in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(p))
    if r.get("kind") == "run" and r.get("launcher") == sys.argv[2] and r.get("rc") == 0 and \
            r.get("ranks_seen") == int(sys.argv[3]) and r.get("iters_logged", 0) > 0:
        print(r["name"])
        break
EOF
        )
        if [ -n "$prior" ]; then
            echo "  $l: see the run $prior"
            python3 - "$W/res/$prior.json" "$W/$prior.cmd" "$l" > "$W/res/$name.json" << 'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r.update(name="launch_" + sys.argv[3], stage="launch", cited=r["name"],
         cmd=open(sys.argv[2]).read().strip()[:160])
print(json.dumps(r))
EOF
            continue
        fi
        if [ "$(left)" -lt 30 ]; then
            skip "$name" "too little time left ($(left) s)"
            continue
        fi
        train "$name" $l "$NGPU" "$ALL_DEVS" "$(budget 60)" --micro_batch_size "$FAULT_MB" \
            --global_batch_size $((FAULT_MB * NGPU)) --train_iters 3 --train_data_path "$RND"
        rc=$?
        record "$name" $rc launch "$NGPU" "$FAULT_MB" 1 --extra \
            cmd="\"$(sed 's/"/\\"/g' "$W/$name.cmd" | cut -c1-160)\""
        grep -h "data parallel over" "$W/$name.log" | head -1
    done
fi

# ---- report ------------------------------------------------------------------------------------
stage report
cat "$W"/res/*.json > "$W/results.jsonl" 2> /dev/null
NOTES=(
    "Machine: DEVICE=$DEVICE, $NGPU $([ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || echo 'Gloo CPU ranks'); $(date -u '+%F %H:%M UTC'); commit $(git rev-parse --short HEAD 2> /dev/null || echo '?')$(git diff --quiet 2> /dev/null || echo ' (dirty)')."
    "Command: $(printf '%q ' env DEVICE="$DEVICE" NGPU="$NGPU" EXTRA17="$EXTRA17" KDA_LIMIT="$LIMIT") bash bench/dist/device_multi.sh; stages: $STAGES."
    "Topology (nvidia-smi topo -m): see topo.txt in the tarball; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE (NVLink multicast off)."
    "Equality tolerance: |loss(1 GPU, accumulation $NGPU) - loss($NGPU GPUs)| <= $EQ_TOL at every iteration, grad norms within 1e-2 relative. Both runs read the same samples into the same micro-batches with the same kernels, so iteration 1 agrees to the printed digits; later iterations differ only through the fp32 summation order of the gradient (NCCL's ring vs in-place accumulation, ~1 ulp per element), which bf16 forward/backward amplify slowly (expected well under 1e-3 over 50 iterations at lr 2e-4); the CPU-rank tests prove the logic bit-exact (tests/test_dist_train.c). A wiring error (a wrong data slice, a layer not reduced, a wrong scale) moves the loss by >= 1e-2 within a few iterations on this text, or the grad norm by a factor."
    "Speed: mb x $SEQ tokens per GPU per iteration, $SPEED_WARMUP warm-up iterations (the last one profiled) then $SPEED_STEPS timed; 1-GPU baselines ran side by side on separate GPUs; NVML peak = device memory in use (context and caches included)."
)
[ "$DEVICE" = cuda ] && grep -q '^{' "$W/torch_sweep.jsonl" 2> /dev/null &&
    NOTES+=("torch's sweep ran while the build used the CPUs (the GPUs were idle otherwise); kda's ran after it.")
note_args=()
for n in "${NOTES[@]}"; do note_args+=(--note "$n"); done
python3 $DIST/multi.py report "$W/results.jsonl" --sweep "$W/sweep.jsonl" --ngpu "$NGPU" \
    --tol "$EQ_TOL" --title "Multi-GPU run: $NGPU x $([ "$DEVICE" = cuda ] && echo GPU || echo 'CPU rank') (issue $([ "$EXTRA17" = 1 ] && echo '16 + 17' || echo 16))" \
    "${note_args[@]}" > "$OUT/multi.md"
cat "$OUT/multi.md"
stage ""
echo "total $(($(date +%s) - START)) s"
tar czf "$OUT/multi_logs.tgz" -C "$W" --exclude='*.bin' --exclude='*.idx' --exclude='ck_*' \
    --exclude='allreduce_bench' . 2> /dev/null
ls -la "$OUT"
