# fla_kernel.py - FLA's chunk_kda timed on the GPU, the reference for bench_gpu.c's KDA rows
# (bench/kda_kernel/run_compare.sh prints both side by side).
#
#   python3 bench/kda_kernel/fla_kernel.py [--B 16] [--T 2048] [--H 8] [--shapes 32x64 128x128]
#           [--modes layer bare] [--warmup-ms 25] [--rep-ms 100] [--seed 0] [--out fla.jsonl]
#   python3 bench/kda_kernel/fla_kernel.py --compare BENCH_GPU.log FLA.jsonl
#           (no GPU work: the side-by-side table of bench_gpu.c's output and these JSON lines)
#
# Shapes are KxV (H = HV, no GVA). Inputs bf16 (q, k, v, raw gate, beta), FLA's init for A_log
# ([H], log U(1, 16)) and dt_bias ([H*K], inverse softplus of log-uniform dt in [1e-3, 0.1]),
# fp32 like the layer's parameters. Modes:
#   layer  what fla.layers.KDA calls: raw q/k/gate/beta logits with use_qk_l2norm_in_kernel,
#          use_gate_in_kernel, use_beta_sigmoid_in_kernel (A_log, dt_bias) and state_v_first;
#          the gate, L2 norms and sigmoid (and their backward) run inside the timed call.
#   bare   pre-normalized q/k (bf16), precomputed fp32 log-decay g = -exp(A_log)·softplus(raw +
#          dt_bias), post-sigmoid β (bf16): chunk_kda's core alone, the setup of the FLA anchor
#          in performance.md §3 (0.84 ms forward, 3.51 ms forward + backward at K32 V64) and the
#          closest match to bench_gpu.c's "kda chunk fwd/bwd" rows (which take the fp32 gate
#          cumsum as input).
# Timing: triton.testing.do_bench, median (it clears L2 between runs); "fwd" is the forward with
# autograd recording (inputs require grad, as in training), "fwd+bwd" the forward plus
# o.backward(do) with gradients reset by do_bench. The first call (Triton compile + autotune)
# is timed separately ("first_call_s"). FLA_ONE_CONFIG=1 (tools/reference/fla_patch.py) keeps
# one autotune config per kernel; the output says which.
# Output: a Markdown table on stdout, one JSON line per (shape, mode) appended to --out:
#   {"impl": "fla", "B", "T", "H", "K", "V", "mode", "fwd_ms", "fwdbwd_ms", "fwd_ns_per_token_head",
#    "fwdbwd_ns_per_token_head", "first_call_s", "autotune"}
import argparse
import json
import math
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
torch = F = None  # imported by gpu_imports(), after fla_patch; --compare needs neither


def gpu_imports():
    global torch, F
    import fla_patch  # noqa: F401  (before fla and triton's users: FLA_ONE_CONFIG)
    import torch
    import torch.nn.functional as F


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="FLA chunk_kda timings (forward, forward+backward)")
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--shapes", nargs="+", default=["32x64", "128x128"], help="KxV per head")
    ap.add_argument("--modes", nargs="+", default=["layer", "bare"], choices=["layer", "bare"])
    ap.add_argument("--warmup-ms", type=float, default=25, help="do_bench warm-up")
    ap.add_argument("--rep-ms", type=float, default=100, help="do_bench measuring time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also append the JSON lines to this file")
    a = ap.parse_args(argv)
    shapes = []
    for s in a.shapes:
        try:
            k, v = (int(x) for x in s.lower().split("x"))
        except ValueError:
            ap.error(f"--shapes: '{s}' is not KxV (e.g. 32x64)")
        if k < 1 or v < 1:
            ap.error(f"--shapes: '{s}': K and V must be >= 1")
        shapes.append((k, v))
    a.shapes = shapes
    if min(a.B, a.T, a.H) < 1:
        ap.error("--B, --T, --H must be >= 1")
    return a


def make_inputs(B, T, H, K, V, mode, seed):
    """Leaf tensors (requires_grad where the layer has gradients) and chunk_kda kwargs."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dev, bf = "cuda", torch.bfloat16

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32)

    A_log = torch.log(torch.empty(H, device=dev).uniform_(1, 16, generator=gen))
    dt = torch.exp(torch.rand(H * K, generator=gen, device=dev) *
                   (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    q, k, v, graw, braw = randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, V), \
        randn(B, T, H, K), randn(B, T, H)
    if mode == "layer":
        leaves = {"q": q.to(bf), "k": k.to(bf), "v": v.to(bf), "g": graw.to(bf),
                  "beta": braw.to(bf), "A_log": A_log, "dt_bias": dt_bias}
        flags = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                     use_beta_sigmoid_in_kernel=True, state_v_first=True)
    else:
        g = -A_log.exp().view(1, 1, H, 1) * F.softplus(graw + dt_bias.view(H, K))
        leaves = {"q": F.normalize(q, dim=-1).to(bf), "k": F.normalize(k, dim=-1).to(bf),
                  "v": v.to(bf), "g": g, "beta": torch.sigmoid(braw).to(bf)}
        flags = {}
    for t in leaves.values():
        t.requires_grad_(True)
    do = randn(B, T, H, V).to(bf)
    return leaves, flags, do


def bench_one(a, K, V, mode):
    from fla.ops.kda import chunk_kda
    from triton.testing import do_bench
    leaves, flags, do = make_inputs(a.B, a.T, a.H, K, V, mode, a.seed)
    grads = list(leaves.values())

    def fwd():
        return chunk_kda(**leaves, scale=K ** -0.5, **flags)[0]

    def fwdbwd():
        fwd().backward(do)

    t0 = time.perf_counter()
    fwdbwd()  # compile + autotune of every kernel of the pair
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ok = all(x.grad is not None and bool(torch.isfinite(x.grad).all()) for x in grads)
    f_ms = do_bench(fwd, warmup=a.warmup_ms, rep=a.rep_ms, return_mode="median")
    fb_ms = do_bench(fwdbwd, warmup=a.warmup_ms, rep=a.rep_ms, grad_to_none=grads,
                     return_mode="median")
    th = a.B * a.T * a.H  # token-heads
    return {"impl": "fla", "B": a.B, "T": a.T, "H": a.H, "K": K, "V": V, "mode": mode,
            "fwd_ms": round(f_ms, 4), "fwdbwd_ms": round(fb_ms, 4),
            "fwd_ns_per_token_head": round(f_ms * 1e6 / th, 3),
            "fwdbwd_ns_per_token_head": round(fb_ms * 1e6 / th, 3),
            "grads_finite": ok, "first_call_s": round(first, 1)}


def table(rows):
    out = ["| shape | mode | fwd ms | fwd+bwd ms | fwd ns/token-head | fwd+bwd ns/token-head | "
           "first call s |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        shape = f"B{r['B']} T{r['T']} H{r['H']} K{r['K']} V{r['V']}"
        if "error" in r:
            out.append(f"| {shape} | {r['mode']} | failed: {r['error'][:80]} | | | | |")
            continue
        out.append(f"| {shape} | {r['mode']} | {r['fwd_ms']:.3f} | {r['fwdbwd_ms']:.3f} | "
                   f"{r['fwd_ns_per_token_head']:.2f} | {r['fwdbwd_ns_per_token_head']:.2f} | "
                   f"{r['first_call_s']:.0f} |")
    return "\n".join(out) + "\n"


# ---- side by side with bench_gpu.c ------------------------------------------------------------

C_LINE = re.compile(r"^(?P<name>\S.*?)\s+(?P<ms>[0-9]+\.[0-9]+)\s+(?P<rate>[0-9.]+) "
                    r"(?P<unit>ns/token-head|TFLOP/s|GB/s)\s*$")
C_SHAPE = re.compile(r"(\d+)x(\d+) H(\d+) K(\d+) V(\d+)")


def parse_bench_gpu(text):
    """{row name: ms} of bench_gpu.c's table, and the set of the KDA rows' (B, T, H, K, V)."""
    rows, shapes = {}, set()
    for line in text.splitlines():
        m = C_LINE.match(line.rstrip())
        if m:
            rows[m["name"]] = float(m["ms"])
            s = C_SHAPE.search(m["name"])
            if s and m["name"].startswith("kda "):
                shapes.add(tuple(int(x) for x in s.groups()))
    return rows, shapes


def _c_ms(rows, *prefixes):
    """Sum of the bench_gpu rows whose names start with each prefix; None if one is missing."""
    total = 0.0
    for p in prefixes:
        hit = [v for k, v in rows.items() if k.startswith(p)]
        if not hit:
            return None
        total += hit[0]
    return total


def _fmt(x, missing):
    return f"{x:.3f}" if x is not None else missing


def _ratio(f, k):
    return f"{f / k:.2f}" if f and k else "–"


def compare(c_text, fla_rows):
    """Markdown: bench_gpu.c's SIMT rows (kda_fast, 'kda fast ...') and tensor-core rows (kda_tc,
    the model's default core: 'kda tc3 ...' kernel version 3, 'kda tc ...' version 4, the default)
    beside FLA per (shape, what), ratios FLA ms / kda.c ms."""
    c, cshapes = parse_bench_gpu(c_text)
    fla = {(r["B"], r["T"], r["H"], r["K"], r["V"], r["mode"]): r for r in fla_rows}
    what = [  # (label, FLA mode, FLA field, core row, gate rows added on the kda.c side)
        ("core forward", "bare", "fwd_ms", "fwd", ()),
        ("core forward + backward", "bare", "fwdbwd_ms", "fwd+bwd", ()),
        ("core fwd + bwd, kept h/Δ (the model's M0)", "bare", "fwdbwd_ms", "fwd+bwd kept", ()),
        ("layer forward (gate in kernel)", "layer", "fwd_ms", "fwd", ("gate+cumsum fwd",)),
        ("layer forward + backward", "layer", "fwdbwd_ms", "fwd+bwd",
         ("gate+cumsum fwd", "gate bwd")),
    ]
    shapes = sorted({k[:5] for k in fla} | cshapes)
    out = ["| shape | what | kda.c SIMT ms | kda.c TC v3 ms | kda.c TC v4 ms | FLA ms | FLA / SIMT "
           "| FLA / TC v3 | FLA / TC v4 (>1: kda.c faster) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for sh in shapes:
        name = "B%d T%d H%d K%d V%d" % sh
        bname = "%dx%d H%d K%d V%d" % sh
        for label, mode, field, core, gate in what:
            r = fla.get(sh + (mode,), {})
            f = r.get(field)
            gate_ms = _c_ms(c, *gate) if gate else 0.0
            if gate and sh[3:] != (32, 64):
                gate_ms = None  # bench_gpu.c times the gate at K32 only
            ks = [c.get(f"kda {impl} {core} {bname}") for impl in ("fast", "tc3", "tc")]
            ks = [k + gate_ms if k is not None and gate_ms is not None else None for k in ks]
            if f is None and ks == [None, None, None]:
                continue
            fc = f"{f:.3f}" if f is not None else ("failed" if "error" in r else "–")
            out.append(f"| {name} | {label} | {_fmt(ks[0], 'n/a')} | {_fmt(ks[1], 'n/a')} "
                       f"| {_fmt(ks[2], 'n/a')} | {fc} | {_ratio(f, ks[0])} | {_ratio(f, ks[1])} "
                       f"| {_ratio(f, ks[2])} |")
    out += ["", "kda.c rows (bench_gpu.c, CUDA events, median of 10): SIMT = 'kda fast ...' "
            "(kda_fast.h, KDA_CORE=simt), TC v3 / v4 = 'kda tc3 ...' / 'kda tc ...' (kda_tc.h, "
            "the default core; KDA_TC_V=3 selects v3, v6 is the default); 'kept' = the "
            "M0 forms (fwd_keep + bwd_kept, no state recompute: what the model runs; FLA "
            "recomputes, so its column repeats the plain fwd+bwd); layer = core + "
            "'gate+cumsum fwd' (+ 'gate bwd'). bench_gpu.c times the L2 norms and β sigmoid "
            "nowhere, so the layer rows leave them out on the kda.c side while FLA's layer call "
            "includes them. FLA: chunk_kda, triton do_bench median; 'core' = the bare mode "
            "(normalized q/k, fp32 log-decay, post-sigmoid β), 'layer' = in-kernel L2 norm, gate "
            "and sigmoid as fla.layers.KDA calls it."]
    extra = [k for k in c if k.startswith("kda ")]
    if extra:
        out += ["", "bench_gpu.c KDA rows: " + "; ".join(f"{k} {c[k]:.3f} ms" for k in extra)]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        c_text = ""
        if os.path.exists(sys.argv[2]):
            with open(sys.argv[2], errors="replace") as f:
                c_text = f.read()
        rows = []
        if os.path.exists(sys.argv[3]):
            with open(sys.argv[3]) as f:
                rows = [json.loads(x) for x in f if x.strip().startswith("{")]
        sys.stdout.write(compare(c_text, rows))
        return
    a = parse_args()
    gpu_imports()
    if not torch.cuda.is_available():
        sys.exit("fla_kernel: no CUDA device visible to torch")
    import fla
    import triton
    info = {"fla": fla.__version__, "torch": torch.__version__, "triton": triton.__version__,
            "gpu": torch.cuda.get_device_name(),
            "autotune": "first-config" if os.environ.get("FLA_ONE_CONFIG") == "1" else "full"}
    print(f"fla_kernel: {info}", file=sys.stderr, flush=True)
    rows = []
    for K, V in a.shapes:
        for mode in a.modes:
            try:
                r = bench_one(a, K, V, mode)
            except Exception as e:  # one shape's failure (compile, OOM) must not hide the others
                r = {"impl": "fla", "B": a.B, "T": a.T, "H": a.H, "K": K, "V": V, "mode": mode,
                     "error": f"{type(e).__name__}: {e}".splitlines()[0]}
            torch.cuda.empty_cache()
            r.update(info)
            rows.append(r)
            print(f"fla_kernel: {json.dumps(r)}", file=sys.stderr, flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(r) + "\n")
    sys.stdout.write(f"FLA chunk_kda ({info['gpu']}, fla {info['fla']}, autotune "
                     f"{info['autotune']}; do_bench median)\n\n" + table(rows))


if __name__ == "__main__":
    main()
