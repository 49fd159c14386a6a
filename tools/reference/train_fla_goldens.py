# train_fla_goldens.py - small KDA models trained by FLA itself, and FLA's scores of them: the
# goldens of tests/data/fla_trained/ (README.md there).
#
# The models of tests/data/golden/ were initialised by FLA but trained with our own float64
# reference math, so a convention that both the reference and the C code got wrong would pass.
# Here FLA 0.6.0 trains (its Triton chunk_kda forward + backward, its fused norm / SwiGLU /
# linear cross-entropy, bf16 autocast over fp32 master weights, torch AdamW, clip 1.0) on
# Moby-Dick (public domain, assets/text/), tokenized with the bundled Llama-3 tokenizer and
# mapped to a small vocabulary (the 8,191 most frequent training ids in order of frequency,
# everything else to id 0), so a model stays a few MB.
#
# Variants (one model each):
#   tied    D 64, 2 layers, H = HV = 2, K 16, V 32, I 128, tied embeddings
#   gva     the same with num_v_heads 4 (GVA), allow_neg_eigval, untied head, I 160
#
# Per model, after save_pretrained and a reload through AutoModelForCausalLM (what is scored is
# exactly what is on disk), on 8 held-out windows of lengths 2 .. 2048:
#   fla_recurrent   FLA in fp32, eval, every layer forced to fused_recurrent_kda (any T)
#   fla_chunk       FLA in fp32, every layer on chunk_kda (grad enabled, which is what makes the
#                   layer pick chunk for T <= 64 too); TF32 off for torch matmuls, but
#                   chunk_kda's tl.dot runs TF32 inside Triton
#   ref64           tools/reference/kda_ref64.py in float64 on the CPU (the spec)
# each as sum_nll, loss (mean) and the per-token NLL list; log-softmax of the fp32 logits in
# float64 so only the model's own numerics remain. A wrapper counts the KDA kernel calls, so a
# path that silently ran the other kernel fails.
#
# Output (--out DIR; 7 files, inside the device tool's 8-file limit):
#   DIR/tied/{config.json, model.safetensors, scores.jsonl}
#   DIR/gva/{config.json, model.safetensors, scores.jsonl}
#   DIR/run.json   versions, hyperparameters, losses, timings, agreement, the vocabulary map
# scores.jsonl lines carry "ids", so `kda score --model DIR/tied --input DIR/tied/scores.jsonl`
# scores them directly.
#
# GPU run (repository root, wheels in .whl/ carried; a few minutes with one autotune config,
# mostly Triton compilation; run.json and each model's files are written as soon as that model
# is done, so if the budget runs out in the second model, --models gva in a second call
# finishes it):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:tools/reference FLA_ONE_CONFIG=1 python3 \
#       tools/reference/train_fla_goldens.py --out $OUT
# CPU check of everything that needs no torch (tokenization, vocabulary map, windows, plan):
#   python3 tools/reference/train_fla_goldens.py --out /tmp/fg --dry-run
#
# Fails (exit 1, one line naming the check) on: NaN or non-decreasing training loss, a tie that
# did not hold, a saved tensor set that differs from the model's, a kernel path not taken, a
# model file over 8 MB, or the time budget; and, after writing every file, on a per-sequence
# mean NLL of FLA fp32 recurrent farther than 1e-5 from float64 or chunk farther than 1e-3.
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # fla_patch, kda_ref64
T0 = time.time()
SCORE_LENGTHS = [2, 17, 64, 65, 100, 257, 1000, 2048]
VOCAB = 8192
COMMON = dict(hidden_size=64, num_hidden_layers=2, num_heads=2, num_v_heads=None, head_dim=16,
              expand_v=2.0, intermediate_size=128, vocab_size=VOCAB, norm_eps=1e-6,
              conv_size=4, use_short_conv=True, max_position_embeddings=2048,
              attn_mode="chunk", fuse_norm=True, fuse_swiglu=True, fuse_cross_entropy=True,
              bos_token_id=1, eos_token_id=2)
MODELS = {
    "tied": dict(config=dict(COMMON, tie_word_embeddings=True, allow_neg_eigval=False), seed=11),
    "gva": dict(config=dict(COMMON, num_v_heads=4, allow_neg_eigval=True, intermediate_size=160,
                            tie_word_embeddings=False), seed=12),
}
TRAIN = dict(steps=300, batch=16, seq=256, lr=3e-3, warmup=20, min_lr_ratio=0.1,
             betas=(0.9, 0.95), weight_decay=0.01, clip=1.0, seed_batches=777, seed_windows=99,
             held_out_fraction=0.1)
# Sanity bars on the per-sequence mean NLL vs float64 (FLA 0.5.2 on score_model measured
# <= 2.9e-7 for fused_recurrent and <= 6.2e-5 for TF32 chunk_kda): 30x and 16x margins.
REC_TOL, CHUNK_TOL, MAX_MODEL_BYTES = 1e-5, 1e-3, 8 << 20


def fail(msg):
    print(f"train_fla_goldens: FAILED: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


# ---- data: tokenize, map to the small vocabulary, held-out windows (no torch) -----------------

def load_tokens(text_path, tokenizer_path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_path)
    with open(text_path, encoding="utf-8") as fh:
        text = fh.read()
    ids = tok.encode(text, add_special_tokens=False).ids
    if len(ids) < 100_000:
        fail(f"{text_path}: only {len(ids)} tokens (want >= 100000)")
    return ids


def vocab_map(train_ids, vocab):
    """Original id -> new id: the vocab-1 most frequent ids (ties by id) get 1.., the rest 0."""
    counts = {}
    for t in train_ids:
        counts[t] = counts.get(t, 0) + 1
    kept = sorted(counts, key=lambda t: (-counts[t], t))[:vocab - 1]
    return {t: i + 1 for i, t in enumerate(kept)}, kept


def windows(held, lengths, seed):
    """Deterministic windows of the held-out ids (a linear congruential generator: no numpy)."""
    state, out = seed, []
    for n in lengths:
        if n > len(held):
            fail(f"held-out part has {len(held)} tokens, a window needs {n}")
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        s = (state >> 33) % (len(held) - n + 1)
        out.append(held[s:s + n])
    return out


def prepare(args):
    raw = load_tokens(args.text, args.tokenizer)
    n_held = int(len(raw) * TRAIN["held_out_fraction"])
    train_raw, held_raw = raw[:-n_held], raw[-n_held:]
    fwd, kept = vocab_map(train_raw, VOCAB)
    train = [fwd.get(t, 0) for t in train_raw]
    held = [fwd.get(t, 0) for t in held_raw]
    unk = sum(1 for t in train if t == 0) / len(train)
    if unk > 0.1:
        fail(f"{unk:.1%} of the training tokens fall outside the {VOCAB}-id vocabulary")
    seqs = windows(held, SCORE_LENGTHS, TRAIN["seed_windows"])
    info = {"text": os.path.basename(args.text), "tokenizer": args.tokenizer,
            "tokens": len(raw), "train_tokens": len(train), "held_out_tokens": len(held),
            "unk_fraction_train": unk, "vocab_map_note": "new id i >= 1 is Llama-3 id "
            "vocab_map[i-1]; new id 0 stands for every other id", "vocab_map": kept}
    log(f"data: {len(raw)} tokens, {len(train)} train / {len(held)} held out, "
        f"{unk:.2%} unknown at vocab {VOCAB}; windows {[len(s) for s in seqs]}")
    return train, seqs, info


# ---- FLA: build, train, save, reload, score -------------------------------------------------

class KernelCount:
    """Wraps fla.layers.kda's chunk_kda / fused_recurrent_kda names to count calls."""

    def __init__(self):
        import fla.layers.kda as L
        self.calls = {"chunk": 0, "fused_recurrent": 0}
        for name, key in (("chunk_kda", "chunk"), ("fused_recurrent_kda", "fused_recurrent")):
            fn = getattr(L, name)

            def wrapped(*a, _fn=fn, _key=key, **kw):
                self.calls[_key] += 1
                return _fn(*a, **kw)
            setattr(L, name, wrapped)

    def take(self):
        c = dict(self.calls)
        self.calls = {k: 0 for k in self.calls}
        return c


def versions(torch):
    import fla
    import transformers
    import triton
    return {"fla": getattr(fla, "__version__", "?"), "torch": torch.__version__,
            "triton": triton.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda,
            "python": sys.version.split()[0],
            "FLA_ONE_CONFIG": os.environ.get("FLA_ONE_CONFIG", "0")}


def lr_at(step):
    t = TRAIN
    warm = min(1.0, (step + 1) / t["warmup"])
    cos = 0.5 * (1 + math.cos(math.pi * step / t["steps"]))
    return t["lr"] * warm * (t["min_lr_ratio"] + (1 - t["min_lr_ratio"]) * cos)


def train_model(torch, name, spec, train_ids, deadline):
    from fla.models import KDAConfig, KDAForCausalLM
    cfg = KDAConfig(**spec["config"])
    torch.manual_seed(spec["seed"])
    m = KDAForCausalLM(cfg).float().cuda()
    tied = spec["config"]["tie_word_embeddings"]
    if (m.lm_head.weight.data_ptr() == m.model.embeddings.weight.data_ptr()) != tied:
        fail(f"{name}: tie_word_embeddings={tied} but the head's storage says otherwise")
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=TRAIN["lr"], betas=TRAIN["betas"],
                            weight_decay=TRAIN["weight_decay"])
    data = torch.tensor(train_ids, dtype=torch.long)
    g = torch.Generator().manual_seed(TRAIN["seed_batches"])
    B, T = TRAIN["batch"], TRAIN["seq"]
    losses = []
    for step in range(TRAIN["steps"]):
        if time.time() > deadline:
            fail(f"{name}: time budget reached at training step {step}")
        for pg in opt.param_groups:
            pg["lr"] = lr_at(step)
        starts = torch.randint(0, len(data) - T, (B,), generator=g).tolist()
        ids = torch.stack([data[s:s + T] for s in starts]).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(input_ids=ids, labels=ids, use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), TRAIN["clip"])
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            fail(f"{name}: loss {losses[-1]} at step {step}")
        if step == 0:
            log(f"{name}: step 1 loss {losses[0]:.4f} (ln V = {math.log(VOCAB):.4f})")
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    if not last < first - 1.0:
        fail(f"{name}: training did not learn (mean loss {first:.3f} -> {last:.3f})")
    log(f"{name}: {TRAIN['steps']} steps, loss {first:.4f} -> {last:.4f}")
    return m, losses


def save_and_reload(torch, name, m, out_dir):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM
    mdir = os.path.join(out_dir, name)
    m.save_pretrained(mdir)
    gen = os.path.join(mdir, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)  # not read by kda; keeps the output inside the 8-file limit
    path = os.path.join(mdir, "model.safetensors")
    size = os.path.getsize(path)
    if size > MAX_MODEL_BYTES:
        fail(f"{path}: {size} bytes > {MAX_MODEL_BYTES}")
    with safe_open(path, "pt") as f:
        saved = set(f.keys())
    want = {n for n, _ in m.named_parameters()}  # named_parameters lists a tied head once
    if saved != want:
        fail(f"{name}: saved tensors differ from the parameters: {sorted(saved ^ want)[:6]}")
    r = AutoModelForCausalLM.from_pretrained(mdir).float().cuda().eval()
    for (n1, p1), (n2, p2) in zip(m.state_dict().items(), r.state_dict().items()):
        if n1 != n2 or not torch.equal(p1, p2):
            fail(f"{name}: reloaded tensor {n2} differs from the trained {n1}")
    log(f"{name}: saved {mdir} ({size} bytes), reloaded bit-identical")
    return r, mdir


def nll_of(torch, logits, ids):
    """Per-target NLL in float64 from [T, V] logits (any dtype) and ids [T]."""
    lp = torch.log_softmax(logits[:-1].double(), -1)
    return -lp.gather(1, ids[1:, None]).squeeze(1)


def score_fla(torch, m, seqs, mode, counter):
    for layer in m.model.layers:
        layer.attn.mode = mode
    rows = []
    n_layers = len(m.model.layers)
    for s in seqs:
        ids = torch.tensor([s], device="cuda")
        counter.take()
        if mode == "chunk":
            with torch.enable_grad():  # grad on: the layer runs chunk_kda for every T
                logits = m(input_ids=ids, use_cache=False).logits[0].detach()
        else:
            with torch.no_grad():
                logits = m(input_ids=ids, use_cache=False).logits[0]
        c = counter.take()
        if c[mode] != n_layers or sum(c.values()) != n_layers:
            fail(f"T={len(s)}: wanted {n_layers} {mode} calls, the layers made {c}")
        if logits.dtype != torch.float32:
            fail(f"T={len(s)}: logits are {logits.dtype}, not float32")
        rows.append(nll_of(torch, logits, ids[0]).cpu().tolist())
    for layer in m.model.layers:
        layer.attn.mode = "chunk"
    return rows


def score_ref64(torch, mdir, seqs):
    import kda_ref64 as R
    P = R.load_params(mdir)
    cfg = R.load_config(os.path.join(mdir, "config.json"))
    rows = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor([s], dtype=torch.long)
            rows.append(R.token_nll(R.model_forward(P, cfg, ids), ids)[0].tolist())
    return rows


def rec(nll):
    return {"sum_nll": sum(nll), "loss": sum(nll) / len(nll),
            "nll": [float(f"{x:.9g}") for x in nll]}


def write_scores(mdir, seqs, paths):
    tmp = os.path.join(mdir, "scores.jsonl.tmp")
    with open(tmp, "w") as fh:
        for i, s in enumerate(seqs):
            row = {"ids": s, "tokens": len(s)}
            for key, rows in paths.items():
                row[key] = rec(rows[i])
            fh.write(json.dumps(row) + "\n")
    os.replace(tmp, os.path.join(mdir, "scores.jsonl"))


def agreement(name, seqs, paths, problems):
    """Per-sequence |d sum_nll| and |d mean| vs float64; bars on the mean (the per-sequence
    score), problems appended, not raised, so the files are written first."""
    out = {}
    for key, tol in (("fla_recurrent", REC_TOL), ("fla_chunk", CHUNK_TOL)):
        worst_sum = worst_mean = 0.0
        for i, s in enumerate(seqs):
            a, b = paths[key][i], paths["ref64"][i]
            ds, dm = abs(sum(a) - sum(b)), abs(sum(a) - sum(b)) / len(a)
            worst_sum, worst_mean = max(worst_sum, ds), max(worst_mean, dm)
            if not dm <= tol:
                problems.append(f"{name}: {key} T={len(s)}: mean NLL {sum(a) / len(a):.9g} vs "
                                f"float64 {sum(b) / len(b):.9g} (|d| {dm:.3g} > {tol})")
        out[key] = {"worst_abs_sum_nll": worst_sum, "worst_abs_mean": worst_mean}
        log(f"{name}: {key} vs float64: worst |d sum_nll| {worst_sum:.3g}, "
            f"|d mean| {worst_mean:.3g}")
    return out


def write_run(out_dir, run):
    with open(os.path.join(out_dir, "run.json.tmp"), "w") as fh:
        json.dump(run, fh, indent=1)
    os.replace(os.path.join(out_dir, "run.json.tmp"), os.path.join(out_dir, "run.json"))


def run_gpu(args, train, seqs, info):
    import fla_patch  # noqa: F401  (before fla: FLA_ONE_CONFIG)
    import torch
    if not torch.cuda.is_available():
        fail("no CUDA device (use --dry-run on a CPU)")
    import fla  # noqa: F401  registers model_type "kda" with transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    counter = KernelCount()
    deadline = T0 + args.budget
    run = {"versions": versions(torch), "train": dict(TRAIN), "data": info, "models": {}}
    log(f"versions: {run['versions']}")
    names, problems = args.models.split(","), []
    for name in names:
        spec = MODELS[name]
        t_start = time.time()
        m, losses = train_model(torch, name, spec, train, deadline)
        t_train = time.time() - t_start
        m, mdir = save_and_reload(torch, name, m, args.out)
        paths = {"fla_recurrent": score_fla(torch, m, seqs, "fused_recurrent", counter)}
        log(f"{name}: scored with fused_recurrent_kda (fp32)")
        paths["fla_chunk"] = score_fla(torch, m, seqs, "chunk", counter)
        log(f"{name}: scored with chunk_kda (fp32)")
        paths["ref64"] = score_ref64(torch, mdir, seqs)
        log(f"{name}: scored with kda_ref64 (float64, CPU)")
        write_scores(mdir, seqs, paths)
        agree = agreement(name, seqs, paths, problems)
        run["models"][name] = {"config": spec["config"], "seed": spec["seed"],
                               "loss_every_25": losses[::25] + losses[-1:],
                               "seconds_train": t_train, "seconds_total": time.time() - t_start,
                               "agreement_vs_float64": agree}
        run["seconds"] = time.time() - T0
        write_run(args.out, run)  # after every model: a later timeout keeps the finished ones
        if time.time() > deadline:
            fail(f"time budget {args.budget} s reached after model {name}")
    if problems:
        fail("FLA disagrees with the float64 spec (files written; see run.json):\n  " +
             "\n  ".join(problems))
    log(f"done: {', '.join(names)} in {args.out}")


def main():
    ap = argparse.ArgumentParser(description="small KDA models trained by FLA, and their scores")
    ap.add_argument("--out", required=True)
    ap.add_argument("--text", default="assets/text/moby_dick.txt")
    ap.add_argument("--tokenizer", default="assets/tokenizers/llama3/tokenizer.json")
    ap.add_argument("--models", default="tied,gva")
    ap.add_argument("--steps", type=int, default=TRAIN["steps"])
    ap.add_argument("--budget", type=float, default=540, help="seconds; fail when exceeded")
    ap.add_argument("--dry-run", action="store_true",
                    help="no torch: data, vocabulary map, windows and plan.json only")
    args = ap.parse_args()
    if args.steps < 50:
        fail("--steps must be >= 50 (the learning check averages 10 steps at each end)")
    TRAIN["steps"] = args.steps
    for name in args.models.split(","):
        if name not in MODELS:
            fail(f"--models: unknown model '{name}' (have {', '.join(MODELS)})")
    os.makedirs(args.out, exist_ok=True)
    train, seqs, info = prepare(args)
    if args.dry_run:
        plan = {"models": {n: MODELS[n] for n in args.models.split(",")}, "train": TRAIN,
                "lengths": [len(s) for s in seqs], "lr_first_last": [lr_at(0),
                lr_at(TRAIN["steps"] - 1)], "data": {k: v for k, v in info.items()
                                                      if k != "vocab_map"}}
        with open(os.path.join(args.out, "plan.json"), "w") as fh:
            json.dump(plan, fh, indent=1)
        log(f"dry run: plan in {os.path.join(args.out, 'plan.json')}")
        return
    run_gpu(args, train, seqs, info)


if __name__ == "__main__":
    main()
