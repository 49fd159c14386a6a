# make_goldens.py - write the golden reference files of tests/data/golden/ (needs a CUDA GPU).
#
# Runs FLA (flash-linear-attention) itself and the independent float64 implementation
# kda_ref64.py on the same inputs and writes, under --out:
#   kda_op_<variant>.safetensors    op-level KDA core: inputs, float64 outputs/gradients,
#                                   FLA chunk_kda (+ fused_recurrent, naive) outputs/gradients
#   model_a/, model_b/              tiny FLA KDAForCausalLM checkpoints (save_pretrained)
#   model_a_step.safetensors, ...   one training step: loss, logits slices, every gradient
#                                   (FLA fp32 and float64 reference)
#   init42/, init42_batch.safetensors   FLA init under torch.manual_seed(42) + first loss
#   score_model/, score_*.jsonl     an FLA-trained byte-level model and per-sequence losses
#   versions.json, summary.txt      versions, agreement table
# Every stage runs in its own try/except; the agreement table is printed last.
#
# Usage (device): python3 tools/reference/make_goldens.py --out DIR --text moby_dick.txt

import argparse
import json
import math
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fla_patch  # noqa: E402,F401  (FLA_ONE_CONFIG=1: one autotune config per kernel)
import torch  # noqa: E402
import kda_ref64 as R  # noqa: E402

T0 = time.time()
# Without a GPU (or with --cpu) the FLA kernels are skipped: only the float64 reference, FLA's
# pure-torch naive op, FLA's model construction / init / save_pretrained run, and the score
# model is trained with kda_ref64's math (fp32) instead of FLA's kernels.
GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
ROWS = []    # (stage, item, metric, value)
NOTES = []   # free-form observations


def elapsed():
    return time.time() - T0


def row(stage, item, metric, value):
    ROWS.append((stage, item, metric, value))


def rel_rms(ref, out):
    """FLA's test metric: RMS(ref - out) / (RMS(ref) + 1e-8), in float64."""
    ref = ref.detach().double().cpu()
    out = out.detach().double().cpu()
    return float((ref - out).pow(2).mean().sqrt() / (ref.pow(2).mean().sqrt() + 1e-8))


def save_st(path, tensors, meta):
    from safetensors.torch import save_file
    clean = {n: t.detach().cpu().contiguous() for n, t in tensors.items()}
    save_file(clean, path, metadata={k: str(v) for k, v in meta.items()})


def scalar(x, dtype):
    return torch.tensor([float(x)], dtype=dtype)


def versions():
    import fla
    import transformers
    import triton
    v = {
        "fla": getattr(fla, "__version__", "?"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(0) if GPU else "none (CPU run)",
        "cuda": torch.version.cuda,
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "python": sys.version.split()[0],
    }
    return v


# ---------------------------------------------------------------------------------------------
# A. op-level goldens

VARIANTS = {
    "base": dict(B=2, T=100, H=2, HV=2, K=32, V=64, neg=False, lb=None, seed=101),
    "gva": dict(B=2, T=130, H=2, HV=4, K=16, V=32, neg=False, lb=None, seed=102),
    "negeig": dict(B=2, T=64, H=2, HV=2, K=32, V=64, neg=True, lb=None, seed=103),
    "bounded": dict(B=2, T=70, H=2, HV=2, K=32, V=64, neg=False, lb=-5.0, seed=104),
}


def op_inputs(c):
    g = torch.Generator().manual_seed(c["seed"])
    B, T, H, HV, K, V = c["B"], c["T"], c["H"], c["HV"], c["K"], c["V"]
    x = {
        "q_raw": torch.randn(B, T, H, K, generator=g),
        "k_raw": torch.randn(B, T, H, K, generator=g),
        "v": torch.randn(B, T, HV, V, generator=g),
        "f": torch.randn(B, T, HV, K, generator=g),
        "b": torch.randn(B, T, HV, generator=g),
        # A_log and dt_bias drawn as FLA's init does (kda-model.md section 7)
        "A_log": torch.empty(HV).uniform_(1, 16, generator=g).log(),
    }
    u = torch.rand(HV * K, generator=g)
    dt = torch.exp(u * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
    x["dt_bias"] = dt + torch.log(-torch.expm1(-dt))
    x["d_o"] = torch.randn(B, T, HV, V, generator=g)
    return {n: t.float() for n, t in x.items()}


GRAD_NAMES = [("q_raw", "dq_raw"), ("k_raw", "dk_raw"), ("v", "dv"), ("f", "df"), ("b", "db"),
              ("A_log", "dA_log"), ("dt_bias", "ddt_bias")]


def op_golden(name, c, out_dir, vers):
    from fla.ops.kda import chunk_kda, fused_recurrent_kda
    x = op_inputs(c)
    T_ = {}
    T_.update(x)
    # float64 reference
    r = {n: x[n].double().requires_grad_(True) for n, _ in GRAD_NAMES}
    o, ht = R.kda_op(r["q_raw"], r["k_raw"], r["v"], r["f"], r["b"], r["A_log"], r["dt_bias"],
                     allow_neg_eigval=c["neg"], lower_bound=c["lb"])
    (o * x["d_o"].double()).sum().backward()
    T_["o"] = o.detach()
    T_["ht"] = ht.detach()
    for n, gname in GRAD_NAMES:
        T_[gname] = r[n].grad.detach()
    # FLA chunk_kda, fp32 inputs, all in-kernel options (as the layer calls it)
    try:
        if not GPU:
            raise RuntimeError("no GPU: FLA chunk_kda not run")
        d = {n: x[n].cuda().requires_grad_(True) for n, _ in GRAD_NAMES}
        of, hf = chunk_kda(q=d["q_raw"], k=d["k_raw"], v=d["v"], g=d["f"], beta=d["b"],
                           A_log=d["A_log"], dt_bias=d["dt_bias"], output_final_state=True,
                           use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                           use_beta_sigmoid_in_kernel=True, allow_neg_eigval=c["neg"],
                           lower_bound=c["lb"])
        of.backward(x["d_o"].cuda())
        if of.dtype != torch.float32:
            NOTES.append(f"op {name}: chunk_kda returned {of.dtype}")
        T_["o_fla"] = of.detach().float()
        T_["ht_fla"] = hf.detach().float()
        row("op:" + name, "o", "rel_rms", rel_rms(T_["o"], of))
        row("op:" + name, "ht", "rel_rms", rel_rms(T_["ht"], hf))
        for n, gname in GRAD_NAMES:
            gr = d[n].grad
            if gr is None:
                NOTES.append(f"op {name}: FLA gives no gradient for {n}")
                continue
            if gr.dtype != torch.float32:
                NOTES.append(f"op {name}: FLA gradient {gname} has dtype {gr.dtype}")
            T_[gname + "_fla"] = gr.detach().float()
            row("op:" + name, gname, "rel_rms", rel_rms(T_[gname], gr))
    except Exception:
        NOTES.append(f"op {name}: chunk_kda failed: " + traceback.format_exc(limit=3))
    # FLA fused_recurrent_kda (forward only; inference kernel)
    try:
        if not GPU:
            raise RuntimeError("no GPU: FLA fused_recurrent_kda not run")
        with torch.no_grad():
            d = {n: x[n].cuda() for n, _ in GRAD_NAMES}
            of, hf = fused_recurrent_kda(q=d["q_raw"], k=d["k_raw"], v=d["v"], g=d["f"],
                                         beta=d["b"], A_log=d["A_log"], dt_bias=d["dt_bias"],
                                         output_final_state=True, use_qk_l2norm_in_kernel=True,
                                         use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                         allow_neg_eigval=c["neg"], lower_bound=c["lb"])
        T_["o_fr_fla"] = of.float()
        T_["ht_fr_fla"] = hf.float()
        row("op:" + name, "o_fused_recurrent", "rel_rms", rel_rms(T_["o"], of))
        row("op:" + name, "ht_fused_recurrent", "rel_rms", rel_rms(T_["ht"], hf))
    except Exception:
        NOTES.append(f"op {name}: fused_recurrent_kda failed: " + traceback.format_exc(limit=3))
    # FLA naive_recurrent_kda (fp32 torch) on our normalized q/k and FLA's naive gate
    try:
        from fla.ops.kda.gate import naive_kda_gate, naive_kda_lowerbound_gate
        from fla.ops.kda.naive import naive_recurrent_kda
        with torch.no_grad():
            d = {n: x[n].to(DEV) for n, _ in GRAD_NAMES}
            if c["lb"] is None:
                gg = naive_kda_gate(d["f"], d["A_log"], d["dt_bias"])
            else:
                gg = naive_kda_lowerbound_gate(d["f"], d["A_log"], d["dt_bias"], c["lb"])
            beta = (2.0 if c["neg"] else 1.0) * torch.sigmoid(d["b"])
            on, _ = naive_recurrent_kda(R.l2norm(d["q_raw"]), R.l2norm(d["k_raw"]), d["v"], gg, beta)
        T_["o_naive_fla"] = on.float()
        row("op:" + name, "o_naive", "rel_rms", rel_rms(T_["o"], on))
    except Exception:
        NOTES.append(f"op {name}: naive_recurrent_kda failed: " + traceback.format_exc(limit=3))
    meta = {k: c[k] for k in ("B", "T", "H", "HV", "K", "V")}
    meta.update(allow_neg_eigval=str(c["neg"]).lower(),
                lower_bound="none" if c["lb"] is None else repr(float(c["lb"])),
                scale=repr(c["K"] ** -0.5), seed=c["seed"], fla_version=vers.get("fla"),
                torch_version=vers.get("torch"), gpu=vers.get("gpu"),
                state_layout="ht* are [B, HV, K, V] (math layout S in R^{KxV})",
                loss="gradients are of sum(o * d_o)")
    save_st(os.path.join(out_dir, f"kda_op_{name}.safetensors"), T_, meta)


# ---------------------------------------------------------------------------------------------
# B. model-level goldens

MODEL_A = dict(hidden_size=64, num_hidden_layers=2, num_heads=2, num_v_heads=None, head_dim=16,
               expand_v=2.0, intermediate_size=128, vocab_size=256, norm_eps=1e-6,
               tie_word_embeddings=True, allow_neg_eigval=False, conv_size=4,
               max_position_embeddings=2048)
MODEL_B = dict(MODEL_A, num_v_heads=4, allow_neg_eigval=True, intermediate_size=160,
               tie_word_embeddings=False)


def fla_model(kwargs, seed):
    import transformers
    from fla.models import KDAConfig, KDAForCausalLM
    if int(transformers.__version__.split(".")[0]) >= 5 and isinstance(
            getattr(KDAForCausalLM, "_tied_weights_keys", None), list):
        KDAForCausalLM._tied_weights_keys = {"lm_head.weight": "model.embeddings.weight"}
    cfg = KDAConfig(**kwargs)
    torch.manual_seed(seed)
    m = KDAForCausalLM(cfg)
    return m.float()


def check_tie(m, tied):
    same = m.lm_head.weight.data_ptr() == m.model.embeddings.weight.data_ptr()
    if same != tied:
        NOTES.append(f"tie check: tie_word_embeddings={tied} but lm_head shares storage={same}")


def fla_step(m, ids):
    """FLA train-mode step on the GPU: loss (fused linear CE), logits (no labels), grads."""
    m.train()
    out = m(input_ids=ids.cuda(), labels=ids.cuda())
    out.loss.backward()
    with torch.no_grad():
        logits = m(input_ids=ids.cuda()).logits.float()
    grads = {}
    for n, p in m.named_parameters():
        if p.grad is None:
            NOTES.append(f"no FLA grad for {n}")
            continue
        grads[n] = p.grad.detach().float()
    return out.loss.item(), logits, grads


def model_golden(name, kwargs, seed, out_dir, vers):
    m = fla_model(kwargs, seed).to(DEV)
    tied = kwargs["tie_word_embeddings"]
    check_tie(m, tied)
    mdir = os.path.join(out_dir, name)
    m.save_pretrained(mdir)
    g = torch.Generator().manual_seed(seed + 1000)
    ids = torch.randint(0, kwargs["vocab_size"], (2, 100), generator=g)
    T_ = {"ids": ids}
    names = [n for n, _ in m.named_parameters()]
    grads = {}
    if GPU:  # FLA: train mode (chunk kernel, fused linear cross-entropy), fp32
        floss, logits, grads = fla_step(m, ids)
        T_["loss"] = scalar(floss, torch.float32)
        T_["logits_head"] = logits[:, :8]
        T_["logits_tail"] = logits[:, -8:]
        for n in grads:
            T_["grad." + n] = grads[n]
    # the float64 reference, loading the weights from the saved directory
    cfg = R.load_config(os.path.join(mdir, "config.json"))
    state = R.load_params(mdir)
    if tied and "lm_head.weight" in state:
        NOTES.append(f"{name}: save_pretrained kept lm_head.weight in a tied model")
    P = R.params_for_autograd(state, tied=tied)
    rl = R.model_forward(P, cfg, ids)
    rloss = R.lm_loss(rl, ids)
    rloss.backward()
    T_["ref64.loss"] = scalar(rloss.item(), torch.float64)
    T_["ref64.logits_head"] = rl.detach()[:, :8]
    T_["ref64.logits_tail"] = rl.detach()[:, -8:]
    worst, worst_n = 0.0, ""
    for n in names:
        if n not in P or P[n].grad is None:
            NOTES.append(f"{name}: no ref64 grad for {n}")
            continue
        T_["ref64.grad." + n] = P[n].grad.detach()
        if n in grads:
            e = rel_rms(P[n].grad, grads[n])
            if e >= worst:
                worst, worst_n = e, n
    row("model:" + name, "loss", "ref64", rloss.item())
    if GPU:
        row("model:" + name, "loss", "fla", floss)
        row("model:" + name, "loss", "abs_diff", abs(floss - rloss.item()))
        row("model:" + name, "logits", "rel_rms",
            rel_rms(torch.cat([T_["ref64.logits_head"], T_["ref64.logits_tail"]], 1),
                    torch.cat([T_["logits_head"], T_["logits_tail"]], 1)))
        row("model:" + name, "grad_worst(" + worst_n + ")", "rel_rms", worst)
    meta = {"config": json.dumps(cfg, sort_keys=True), "seed": seed, "fla_version": vers.get("fla"),
            "torch_version": vers.get("torch"), "gpu": vers.get("gpu"),
            "fla_mode": ("train(): chunk_kda + FusedLinearCrossEntropyLoss, fp32 weights, no autocast"
                         if GPU else "not run (no GPU): only ref64.* entries"),
            "labels": "labels = ids, shifted inside the model; loss = mean over B*(T-1) targets",
            "logits_head": "logits[:, :8, :]", "logits_tail": "logits[:, -8:, :]"}
    save_st(os.path.join(out_dir, f"{name}_step.safetensors"), T_, meta)


# ---------------------------------------------------------------------------------------------
# D. FLA init golden

def init_golden(out_dir, vers):
    m = fla_model(MODEL_A, 42).to(DEV)
    check_tie(m, True)
    m.save_pretrained(os.path.join(out_dir, "init42"))
    for n, p in m.named_parameters():
        if n.endswith("A_log"):
            a = p.detach().exp()
            row("init42", n, "exp(A_log) min/max", f"{a.min().item():.3f}/{a.max().item():.3f}")
        if n.endswith("attn.dt_bias"):
            dt = torch.nn.functional.softplus(p.detach())
            row("init42", n, "softplus min/max", f"{dt.min().item():.2e}/{dt.max().item():.2e}")
        if n == "model.embeddings.weight":
            row("init42", n, "std", p.detach().std().item())
    g = torch.Generator().manual_seed(4242)
    ids = torch.randint(0, 256, (4, 128), generator=g)
    loss = float("nan")
    if GPU:
        m.train()
        with torch.no_grad():
            loss = m(input_ids=ids.cuda(), labels=ids.cuda()).loss.item()
    P = R.load_params(os.path.join(out_dir, "init42"))
    cfg = R.load_config(os.path.join(out_dir, "init42", "config.json"))
    with torch.no_grad():
        rloss = R.lm_loss(R.model_forward(P, cfg, ids), ids).item()
    T_ = {"ids": ids, "ref64.loss": scalar(rloss, torch.float64)}
    if GPU:
        T_["loss"] = scalar(loss, torch.float64)
    save_st(os.path.join(out_dir, "init42_batch.safetensors"), T_,
            {"seed": 42, "ids_seed": 4242, "fla_version": vers.get("fla"),
             "torch_version": vers.get("torch"),
             "note": "loss = FLA fp32 train-mode loss of the init42 model on ids (labels = ids); "
                     "ref64.loss = kda_ref64 float64 loss of the same"})
    if GPU:
        row("init42", "loss", "fla", loss)
    row("init42", "loss", "ref64", rloss)
    row("init42", "loss", "ln(256)+0.02^2*64/2", math.log(256) + 0.02 ** 2 * 64 / 2)


# ---------------------------------------------------------------------------------------------
# C. score goldens

SCORE_LENGTHS = [2, 17, 64, 65, 100, 257, 1000, 2048]


def score_golden(out_dir, text_path, vers, deadline, steps=300):
    data = torch.tensor(list(open(text_path, "rb").read()), dtype=torch.long)
    held = 100_000
    train, evald = data[:-held], data[-held:]
    m = fla_model(MODEL_A, 7).to(DEV)
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    g = torch.Generator().manual_seed(777)
    # GPU: FLA's own kernels train the model. CPU: kda_ref64's math in fp32 on the same FLA
    # module's parameters (per-token recurrence; about 0.5 s a step on 2 cores at 8 x 256).
    Bt, Tt, warm = (16, 256, 20) if GPU else (8, 256, 20)
    P_train, cfg_train = dict(m.named_parameters()), m.config.to_dict()
    losses = []
    done = 0
    for step in range(steps):
        if time.time() > deadline:
            NOTES.append(f"score: training stopped at step {step} (time budget)")
            break
        lr = 3e-3 * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for pg in opt.param_groups:
            pg["lr"] = lr
        starts = torch.randint(0, len(train) - Tt, (Bt,), generator=g)
        ids = torch.stack([train[s:s + Tt] for s in starts.tolist()]).to(DEV)
        if GPU:
            loss = m(input_ids=ids, labels=ids).loss
        else:
            loss = R.lm_loss(R.model_forward(P_train, cfg_train, ids), ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        done = step + 1
    row("score", "train", "steps", done)
    row("score", "train", "loss first/last", f"{losses[0]:.4f}/{losses[-1]:.4f}")
    mdir = os.path.join(out_dir, "score_model")
    m.save_pretrained(mdir)
    with open(os.path.join(out_dir, "score_train_log.json"), "w") as fh:
        json.dump({"steps": done, "batch": [Bt, Tt], "lr": 3e-3, "warmup": warm,
                   "schedule": "linear warmup then cosine to 0.1x", "betas": [0.9, 0.95],
                   "weight_decay": 0.01, "clip": 1.0, "seed_model": 7, "seed_batches": 777,
                   "precision": "fp32 weights, no autocast",
                   "trainer": ("FLA KDAForCausalLM (chunk_kda, fused CE) on " + vers.get("gpu", "?")
                               if GPU else "kda_ref64 math in fp32 torch on the CPU (FLA module "
                               "parameters, FLA init); FLA kernels not run"),
                   "text": os.path.basename(text_path), "train_bytes": len(train),
                   "loss_every_25": losses[::25] + losses[-1:]}, fh)
    m.eval()
    seqs = []
    gs = torch.Generator().manual_seed(99)
    for n in SCORE_LENGTHS:
        s = int(torch.randint(0, len(evald) - n, (1,), generator=gs))
        seqs.append(evald[s:s + n].tolist())
    fla_rows = []
    with torch.no_grad():
        for s in (seqs if GPU else []):
            ids = torch.tensor([s]).cuda()
            out = m(input_ids=ids, labels=ids)
            lp = torch.log_softmax(out.logits.double()[0, :-1], -1)
            nll64 = -lp.gather(-1, ids[0, 1:, None]).squeeze(-1)
            fla_rows.append({"tokens": len(s), "loss": out.loss.item(),
                             "sum_nll": out.loss.item() * (len(s) - 1),
                             "sum_nll_from_logits": nll64.sum().item(),
                             "kernel": "fused_recurrent" if len(s) <= 64 else "chunk"})
    with open(os.path.join(out_dir, "score_inputs.jsonl"), "w") as fh:
        for s in seqs:
            fh.write(json.dumps({"ids": s}) + "\n")
    if GPU:
        with open(os.path.join(out_dir, "score_fla.jsonl"), "w") as fh:
            for r_ in fla_rows:
                fh.write(json.dumps(r_) + "\n")
    P = R.load_params(mdir)
    cfg = R.load_config(os.path.join(mdir, "config.json"))
    ref_rows = R.score_sequences(P, cfg, seqs)
    with open(os.path.join(out_dir, "score_ref64.jsonl"), "w") as fh:
        for r_ in ref_rows:
            fh.write(json.dumps(r_) + "\n")
    for b in ref_rows:
        row("score", f"T={b['tokens']}", "ref64 loss", b["loss"])
    for a, b in zip(fla_rows, ref_rows):
        row("score", f"T={a['tokens']} ({a['kernel']})", "fla/ref64/absdiff",
            f"{a['loss']:.6f}/{b['loss']:.6f}/{abs(a['loss'] - b['loss']):.2e}")


# ---------------------------------------------------------------------------------------------

def print_summary(out_dir):
    lines = [f"{'stage':<14} {'item':<40} {'metric':<22} value"]
    for st, it, me, va in ROWS:
        if isinstance(va, float):
            va = f"{va:.3e}" if (va != 0 and (abs(va) < 1e-2 or abs(va) >= 1e4)) else f"{va:.6f}"
        lines.append(f"{st:<14} {it:<40} {me:<22} {va}")
    lines.append("notes:")
    lines.extend("  " + n.strip().replace("\n", "\n    ") for n in NOTES)
    lines.append(f"elapsed {elapsed():.1f} s")
    text = "\n".join(lines)
    if out_dir:
        with open(os.path.join(out_dir, "summary.txt"), "w") as fh:
            fh.write(text + "\n")
    print("=" * 100)
    print(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--budget", type=float, default=500.0, help="seconds for the whole run")
    ap.add_argument("--stages", default="versions,ops,models,init,score")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(1)  # tiny float64 ops: threads only add overhead
    stages = a.stages.split(",")
    vers = {}
    try:
        try:
            vers = versions()
            with open(os.path.join(a.out, "versions.json"), "w") as fh:
                json.dump(vers, fh, indent=1)
            print("versions", vers, flush=True)
        except Exception:
            NOTES.append("versions failed: " + traceback.format_exc(limit=3))
        if "ops" in stages:
            for name, c in VARIANTS.items():
                t = elapsed()
                try:
                    op_golden(name, c, a.out, vers)
                except Exception:
                    NOTES.append(f"op {name} failed: " + traceback.format_exc(limit=4))
                print(f"op {name} done in {elapsed() - t:.1f} s", flush=True)
        if "models" in stages:
            for name, kw, seed in (("model_a", MODEL_A, 1), ("model_b", MODEL_B, 2)):
                t = elapsed()
                try:
                    model_golden(name, kw, seed, a.out, vers)
                except Exception:
                    NOTES.append(f"{name} failed: " + traceback.format_exc(limit=4))
                print(f"{name} done in {elapsed() - t:.1f} s", flush=True)
        if "init" in stages:
            t = elapsed()
            try:
                init_golden(a.out, vers)
            except Exception:
                NOTES.append("init42 failed: " + traceback.format_exc(limit=4))
            print(f"init42 done in {elapsed() - t:.1f} s", flush=True)
        if "score" in stages:
            t = elapsed()
            try:
                # leave ~60 s for scoring and the reference after training
                score_golden(a.out, a.text, vers, deadline=T0 + a.budget - 60)
            except Exception:
                NOTES.append("score failed: " + traceback.format_exc(limit=4))
            print(f"score done in {elapsed() - t:.1f} s", flush=True)
    except KeyboardInterrupt:
        NOTES.append(f"interrupted at {elapsed():.0f} s")
    finally:
        print_summary(a.out)


if __name__ == "__main__":
    main()
