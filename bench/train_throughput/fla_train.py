# fla_train.py - FLA's training throughput for a KDA model on one GPU: the reference side of
# bench/train_throughput (run.sh runs kda.c's `kda train` on the same GPU in the same run).
#
#   python3 bench/train_throughput/fla_train.py [--config configs/kda_300M.json] [--seq 2048]
#           [--mb 16 32 64] [--try-mb 96 128] [--warmup 3] [--steps 10] [--seed 0]
#           [--out fla.jsonl] [--wait-file PATH]
#
# Setup (docs/perf-log.md "CUDA: how to run the benchmarks"; the same as the FLA anchor in
# performance.md §3): FLA's KDAForCausalLM built from the config (fused RMSNorm / SwiGLU / linear
# cross-entropy as the config says), fp32 master weights, torch.autocast(bfloat16),
# torch.optim.AdamW(fused=True, lr 2e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.01 on every
# parameter, as a plain FLA run does), grad-norm clip 1.0, uniformly random token ids (seeded),
# labels = inputs (FLA shifts inside: seq - 1 targets per row), use_cache=False.
# Per micro-batch: a fresh model (same seed, so step 1 is the loss at initialization) and
# optimizer; `warmup` steps (Triton compile/autotune happens in the first) excluded from timing;
# `steps` timed steps between CUDA events with no host sync inside (losses are read at the end).
# One JSON line per micro-batch on stdout (and appended to --out):
#   {"impl": "fla", "mb", "seq", "tokens_per_s", "ms_per_step", "ms_per_step_median",
#    "max_memory_allocated_gib", "max_memory_reserved_gib", "gpu_mem_used_mib" (NVML, see
#    gpumem.py), "step1_loss", "last_loss", "warmup_s", ...}
# --try-mb sizes run after --mb, in order, until the first that runs out of memory (recorded as
# {"mb": n, "oom": true}): "the largest micro-batch that fits".
#
# FLA_ONE_CONFIG=1 (tools/reference/fla_patch.py, imported before fla) keeps one autotune config
# per Triton kernel: minutes less compile time on a fresh machine, possibly slower kernels than
# FLA's tuned choice. The JSON says which ("autotune": "first-config" | "full").
import argparse
import gc
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
sys.path.insert(0, HERE)
import fla_patch  # noqa: E402  (before fla: FLA_ONE_CONFIG and the transformers-5 tie fix)
import torch  # noqa: E402

from gpumem import GpuMemSampler  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="FLA KDAForCausalLM training throughput")
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "kda_300M.json"))
    ap.add_argument("--seq", type=int, default=2048, help="tokens per row")
    ap.add_argument("--mb", type=int, nargs="+", default=[16, 32, 64], help="micro-batch sizes")
    ap.add_argument("--try-mb", type=int, nargs="*", default=[],
                    help="larger micro-batches tried after --mb until the first OOM")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (compile, autotune)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--clip", type=float, default=1.0, help="grad-norm clip (0: off)")
    ap.add_argument("--out", default=None, help="also append the JSON lines to this file")
    ap.add_argument("--wait-file", default=None,
                    help="before timing, wait until this file exists (run.sh: the kda.c build "
                         "has finished and left the CPUs idle)")
    ap.add_argument("--wait-max", type=float, default=400, help="seconds to wait at most")
    a = ap.parse_args(argv)
    if a.warmup < 1 or a.steps < 1 or a.seq < 2 or min(a.mb + a.try_mb) < 1:
        ap.error("need --warmup >= 1, --steps >= 1, --seq >= 2 and micro-batches >= 1")
    return a


def load_config(path):
    """KDAConfig from a config.json (the keys FLA's own save_pretrained writes)."""
    from fla.models import KDAConfig
    with open(path) as f:
        cfg = json.load(f)
    for k in ("architectures", "model_type", "transformers_version", "torch_dtype", "dtype"):
        cfg.pop(k, None)
    return KDAConfig(**cfg)


def build(cfg, seed, lr):
    from fla.models import KDAForCausalLM
    fla_patch.tie_fix()
    torch.manual_seed(seed)
    model = KDAForCausalLM(cfg).cuda().float().train()
    if cfg.tie_word_embeddings and \
            model.lm_head.weight.data_ptr() != model.model.embeddings.weight.data_ptr():
        raise RuntimeError("tie_word_embeddings is set but lm_head does not share the embedding")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.01, fused=True)
    return model, opt


def step(model, opt, ids, clip):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def wait_for(path, max_s):
    """Sleeps until path exists (or max_s passed); returns the seconds waited."""
    t0 = time.perf_counter()
    while path and not os.path.exists(path) and time.perf_counter() - t0 < max_s:
        time.sleep(0.5)
    if path and not os.path.exists(path):
        print(f"fla_train: {path} did not appear in {max_s:g} s; timing anyway", file=sys.stderr)
    return time.perf_counter() - t0


def run_one(cfg, a, mb):
    """Trains warmup + steps iterations at micro-batch mb; returns the result dict."""
    n = a.warmup + a.steps
    g = torch.Generator().manual_seed(a.seed + mb)
    batches = torch.randint(0, cfg.vocab_size, (n, mb, a.seq), generator=g).pin_memory()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    with GpuMemSampler(torch.cuda.current_device()) as mem:
        model, opt = build(cfg, a.seed, a.lr)
        losses = []
        t0 = time.perf_counter()
        for i in range(a.warmup):
            losses.append(step(model, opt, batches[i].cuda(non_blocking=True), a.clip))
        torch.cuda.synchronize()
        warm_s = time.perf_counter() - t0
        waited_s = wait_for(a.wait_file, a.wait_max)
        if a.wait_file and not os.path.exists(a.wait_file):
            a.wait_file = None  # waited in vain once: do not wait again
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps + 1)]
        ev[0].record()
        for i in range(a.steps):
            losses.append(step(model, opt, batches[a.warmup + i].cuda(non_blocking=True), a.clip))
            ev[i + 1].record()
        torch.cuda.synchronize()
    steps_ms = [ev[i].elapsed_time(ev[i + 1]) for i in range(a.steps)]
    per = sorted(steps_ms)
    total = ev[0].elapsed_time(ev[-1])
    ms = total / a.steps
    losses = [x.item() for x in losses]
    mr = mem.result()
    res = {
        "impl": "fla", "mb": mb, "seq": a.seq, "warmup": a.warmup, "steps": a.steps,
        "tokens_per_s": round(mb * a.seq / (ms / 1000), 1), "ms_per_step": round(ms, 2),
        "ms_per_step_median": round(per[len(per) // 2] if len(per) % 2 else
                                    (per[len(per) // 2 - 1] + per[len(per) // 2]) / 2, 2),
        "max_memory_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "max_memory_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
        "gpu_mem_used_mib": mr["peak_mib"],
        "gpu_mem_baseline_mib": mr["baseline_mib"],
        "step1_loss": round(losses[0], 5), "last_loss": round(losses[-1], 5),
        "finite": all(math.isfinite(x) for x in losses), "warmup_s": round(warm_s, 1),
        "waited_s": round(waited_s, 1),
        # each timed step in order: a slow step at a fixed time into the run (kda.c's side shows
        # one about 1 s in at the 700 W cap, perf-log.md) is visible here too, or not
        "steps_ms": [round(x, 1) for x in steps_ms],
    }
    # the clocks and power beside kda.c's (report.py): kda.c runs at the H200's 700 W cap, FLA
    # below it (669-675 W, docs/log/gpu-2026-12-03.md §18)
    for k in ("sm_clock_mhz_mean", "sm_clock_mhz_min", "power_w_mean", "power_w_max",
              "temp_c_max"):
        res["gpu_" + k] = mr[k]
    del model, opt, batches
    torch.cuda.empty_cache()
    return res


def versions():
    import fla
    import transformers
    import triton
    return {"torch": torch.__version__, "triton": triton.__version__, "fla": fla.__version__,
            "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(),
            "autotune": "first-config" if os.environ.get("FLA_ONE_CONFIG") == "1" else "full"}


def emit(res, out):
    line = json.dumps(res)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def main():
    a = parse_args()
    if not torch.cuda.is_available():
        sys.exit("fla_train: no CUDA device visible to torch")
    import fla  # noqa: F401  (registers the model classes)
    cfg = load_config(a.config)
    info = versions()
    print(f"fla_train: {info}", file=sys.stderr, flush=True)
    for mb in a.mb + a.try_mb:
        res = None
        try:
            res = run_one(cfg, a, mb)
        except torch.OutOfMemoryError:
            pass
        if res is None:  # out of memory: free the failed step's tensors (after the except block,
            gc.collect()  # whose traceback kept them alive)
            torch.cuda.empty_cache()
            res = {"impl": "fla", "mb": mb, "seq": a.seq, "oom": True}
        res.update(info)
        emit(res, a.out)
        print(f"fla_train: mb {mb}: " + (
            "out of memory" if res.get("oom") else
            f"{res['tokens_per_s']:.0f} tokens/s, {res['ms_per_step']:.1f} ms/step, "
            f"{res['max_memory_allocated_gib']:.1f} GiB allocated, loss {res['step1_loss']:.4f}, "
            f"warm-up {res['warmup_s']:.0f} s"), file=sys.stderr, flush=True)
        if res.get("oom") and mb in a.try_mb:
            break


if __name__ == "__main__":
    main()
