# fla_side.py - the FLA side of the loss-parity benchmark (bench/parity/run.sh) and its report.
#
#   python3 bench/parity/fla_side.py run --work W --data PREFIX --held-jsonl W/held.jsonl
#           --kda-metrics W/kda_ckpt/metrics.jsonl --kda-hf W/kda_hf     (GPU: torch + FLA)
#   python3 bench/parity/fla_side.py chunks --data PREFIX [--iters 3]   (numpy: the chunk order)
#   python3 bench/parity/fla_side.py held --data PREFIX --n 16 --out held.jsonl   (numpy)
#   python3 bench/parity/fla_side.py report --work W --out OUT          (standard library)
#
# run, in order (run.sh starts it while kda.c builds, so Triton compiles meanwhile):
#   1. FLA builds KDA-300M (configs/kda_300M.json) under torch.manual_seed(42) and
#      save_pretrained's it to W/fla_init (kda.c starts from it with --init-from), then touches
#      W/fla_init.done.
#   2. Two warm-up steps on random ids compile the Triton kernels; the weights are then restored
#      from the saved state (bit for bit) and the optimizer is created afresh.
#   3. Waits for W/kda.done (kda.c trained and exported), reads kda.c's metrics.jsonl and checks
#      its learning rates against the schedule of parity_300M.yaml (Megatron's: the lr logged at
#      iteration i is lr(i), the one update i + 1 uses; update 1 uses lr(0) = 0 in warm-up).
#   4. Trains the same iterations on the same chunks in the same order: the dataset PREFIX
#      (.bin/.idx) concatenated and cut into 2048-token chunks, permuted by numpy's legacy
#      MT19937 RandomState(seed).shuffle (what kda.c's data_order fla draws), global sample g of
#      iteration i = i * 16 + j reading chunk perm[g mod n_chunks]; bf16 autocast over fp32
#      master weights, torch AdamW (fused, betas 0.9/0.95, eps 1e-8) with the weight-decay
#      groups of training-recipe.md §1.3 (no decay: RMSNorm weights, dt_bias, g_proj.1.bias),
#      clip 1.0, kda.c's learning rate of every update. Losses -> W/fla_metrics.jsonl.
#   5. save_pretrained's the final model to W/fla_final and scores the held-out chunks with its
#      own final model and with kda.c's exported one (W/kda_hf): bf16 autocast body, fp32 head,
#      float64 log-softmax; -> W/fla_scores.json; touches W/fla.done.
# report: the seed's table (iteration | FLA | kda.c | Δ %), window means, cross-scores and the
# pass bars -> OUT/parity.md and OUT/parity.json.
import argparse
import json
import math
import os
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
T0 = time.time()
SEQ, MB, SEED = 2048, 16, 42
NO_DECAY_SUFFIXES = ("attn_norm.weight", "mlp_norm.weight", "attn.o_norm.weight", "attn.dt_bias",
                     "attn.g_proj.1.bias")
BARS = {"iter1_rel": 1e-3, "window_rel": 5e-3, "window_from": 100, "cross_abs": 2e-3}
WINDOW = 50


def fail(msg):
    print(f"fla_side: FAILED: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def log(msg):
    print(f"[fla_side {time.time() - T0:6.1f}s] {msg}", flush=True)


# ---- data (numpy): the Megatron indexed dataset, the chunks, the permutation -----------------

def read_indexed(prefix):
    """All tokens of PREFIX.bin in sequence order (numpy array) after checking the .idx."""
    import numpy as np
    with open(prefix + ".idx", "rb") as f:
        head = f.read(9 + 8 + 1 + 8 + 8)
        if head[:9] != b"MMIDIDX\x00\x00":
            fail(f"{prefix}.idx: not a Megatron index (magic {head[:9]!r})")
        version, code, n_seq, n_doc = struct.unpack("<QBQQ", head[9:])
        if version != 1 or code not in (4, 8):
            fail(f"{prefix}.idx: version {version}, dtype code {code} (want 1; 4 int32 / 8 uint16)")
        lengths = np.frombuffer(f.read(4 * n_seq), dtype="<i4")
        pointers = np.frombuffer(f.read(8 * n_seq), dtype="<i8")
    dt = np.dtype("<i4") if code == 4 else np.dtype("<u2")
    data = np.fromfile(prefix + ".bin", dtype=dt)
    if int(lengths.sum()) != data.size or (n_seq and pointers[0] != 0):
        fail(f"{prefix}: .idx says {int(lengths.sum())} tokens, .bin holds {data.size}")
    # sequences are stored back to back in index order, so the stream is the file itself
    return data.astype(np.int64)


def chunk_table(prefix, seq=SEQ):
    stream = read_indexed(prefix)
    n = stream.size // seq
    if n < 1:
        fail(f"{prefix}: {stream.size} tokens, fewer than one {seq}-token chunk")
    return stream[:n * seq].reshape(n, seq)


def permutation(n_chunks, seed=SEED):
    import numpy as np
    perm = np.arange(n_chunks, dtype=np.int64)
    np.random.RandomState(seed).shuffle(perm)
    return perm


def batch_chunks(perm, it, mb=MB):
    """Chunk ids of iteration it (0-based) at micro-batch mb, one data-parallel rank."""
    return [int(perm[(it * mb + j) % len(perm)]) for j in range(mb)]


# ---- learning rate: the schedule of parity_300M.yaml, checked against kda.c's log -------------

def read_yaml_scalars(path):
    """The flat `key: value` scalars of a run-config YAML (enough for the schedule keys)."""
    out = {}
    with open(path) as fh:
        for line in fh:
            line = line.split("#", 1)[0].rstrip()
            if ":" in line and not line.startswith(" "):
                k, v = line.split(":", 1)
                out[k.strip()] = v.strip()
    return out


def lr_at(n, y):
    """Megatron's lr(n) (kda.c's kda_lr_at): linear warm-up, then cosine to min_lr."""
    lr, lo = float(y["lr"]), float(y["min_lr"])
    warm, decay = int(y["lr_warmup_iters"]), int(y["lr_decay_iters"])
    if y.get("lr_decay_style", "cosine") != "cosine":
        fail("parity_300M.yaml: lr_decay_style must be cosine (what lr_at implements)")
    if warm > 0 and n <= warm:
        return lr * n / warm
    if n > decay:
        return lo
    r = (n - warm) / (decay - warm)
    return lo + 0.5 * (1 + math.cos(math.pi * r)) * (lr - lo)


def read_metrics(path):
    rows = {}
    with open(path) as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                rows[int(r["iteration"])] = r
    return rows


def update_lrs(metrics, y, iters):
    """lrs[u] = lr(u - 1) for updates u = 1..iters, in double from the schedule, after checking
    that every lr kda.c logged (lr(i) after update i, 9 significant digits) equals it."""
    for it in range(1, iters + 1):
        if it not in metrics:
            fail(f"kda.c metrics.jsonl has no iteration {it} (log_interval must be 1)")
        want, got = lr_at(it, y), float(metrics[it]["lr"])
        if abs(got - want) > 1e-8 * max(abs(want), 1e-12) + 1e-15:
            fail(f"iteration {it}: kda.c logged lr {got:.9g}, the schedule says {want:.9g}")
        if metrics[it].get("skipped", 0):
            fail(f"kda.c skipped iteration {it} (non-finite loss or gradient)")
    return [None] + [lr_at(u - 1, y) for u in range(1, iters + 1)]


# ---- FLA (torch) ------------------------------------------------------------------------------

def fla_config(path):
    from fla.models import KDAConfig
    with open(path) as f:
        cfg = json.load(f)
    for k in ("architectures", "model_type", "transformers_version", "torch_dtype", "dtype"):
        cfg.pop(k, None)
    return KDAConfig(**cfg)


def decay_groups(model, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        nd = name == "model.norm.weight" or name.endswith(NO_DECAY_SUFFIXES)
        if p.dim() == 1 and not nd and not name.endswith("attn.A_log"):
            fail(f"{name}: a 1-D parameter outside the §1.3 rules")
        (no_decay if nd else decay).append(p)
    L = model.config.num_hidden_layers
    if len(no_decay) != 5 * L + 1:
        fail(f"{len(no_decay)} no-decay tensors, want 5 per layer + the final norm = {5 * L + 1}")
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def wait_for(path, limit):
    t = time.time()
    while not os.path.exists(path):
        if time.time() - t > limit:
            fail(f"{path} did not appear within {limit} s")
        time.sleep(0.5)


def score_model(torch, model, held):
    """Per-sequence mean NLL of each held-out row: bf16 autocast body, fp32 head, float64
    log-softmax (rows in groups of 4: the [4, 2048, V] logits fit)."""
    W = model.lm_head.weight.float()
    out = []
    with torch.no_grad():
        for i in range(0, len(held), 4):
            ids = torch.tensor(held[i:i + 4], device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = model.model(input_ids=ids, use_cache=False)[0]
            logits = h.float() @ W.T
            lp = torch.log_softmax(logits[:, :-1].double(), -1)
            nll = -lp.gather(-1, ids[:, 1:, None]).squeeze(-1)
            out += nll.mean(-1).tolist()
    return out


def cmd_run(a):
    sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
    import fla_patch  # noqa: F401  (before fla: FLA_ONE_CONFIG)
    import torch
    if not torch.cuda.is_available():
        fail("no CUDA device")
    import fla  # noqa: F401
    from fla.models import KDAForCausalLM
    from transformers import AutoModelForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    y = read_yaml_scalars(a.yaml)
    iters = a.iters or int(y["train_iters"])
    w = a.work
    # 1. FLA's init
    fla_patch.tie_fix()
    torch.manual_seed(SEED)
    model = KDAForCausalLM(fla_config(a.config)).cuda().float()
    tied = model.config.tie_word_embeddings
    if tied and model.lm_head.weight.data_ptr() != model.model.embeddings.weight.data_ptr():
        fail("tie_word_embeddings is set but lm_head does not share the embedding")
    model.save_pretrained(os.path.join(w, "fla_init"))
    init_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    open(os.path.join(w, "fla_init.done"), "w").close()
    log(f"init saved ({sum(p.numel() for p in model.parameters())} parameters)")
    # 2. warm-up compile on random ids, then restore
    model.train()
    opt = torch.optim.AdamW(decay_groups(model, 0.01), lr=0.0, betas=(0.9, 0.95), eps=1e-8,
                            fused=True)
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        ids = torch.randint(0, model.config.vocab_size, (MB, SEQ), generator=g).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    model.load_state_dict(init_state)
    for k, v in model.state_dict().items():
        if not torch.equal(v, init_state[k]):
            fail(f"{k}: not restored after the warm-up")
    del opt, init_state
    torch.cuda.empty_cache()  # kda.c trains on the same GPU meanwhile
    log("warm-up done (Triton kernels compiled), weights restored")
    # 3. kda.c's run
    wait_for(os.path.join(w, "kda.done"), a.wait_max)
    lrs = update_lrs(read_metrics(a.kda_metrics), y, iters)
    chunks = chunk_table(a.data)
    perm = permutation(len(chunks), int(y["seed"]))
    log(f"data: {len(chunks)} chunks of {SEQ}; kda.c lr checked for {iters} updates")
    # 4. train
    opt = torch.optim.AdamW(decay_groups(model, float(y["weight_decay"])), lr=0.0,
                            betas=(float(y["adam_beta1"]), float(y["adam_beta2"])),
                            eps=float(y["adam_eps"]), fused=True)
    clip = float(y["clip_grad"])
    losses, norms = [], []
    t_train = time.time()
    for u in range(1, iters + 1):
        for pg in opt.param_groups:
            pg["lr"] = lrs[u]
        ids = torch.from_numpy(chunks[batch_chunks(perm, u - 1)]).cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip).detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    torch.cuda.synchronize()
    t_train = time.time() - t_train
    losses = [x.item() for x in losses]
    norms = [x.item() for x in norms]
    if not all(math.isfinite(x) for x in losses + norms):
        fail("non-finite FLA loss or grad norm")
    with open(os.path.join(w, "fla_metrics.jsonl"), "w") as fh:
        for u in range(1, iters + 1):
            fh.write(json.dumps({"iteration": u, "lr": lrs[u], "loss": losses[u - 1],
                                 "grad_norm": norms[u - 1]}) + "\n")
    log(f"trained {iters} iterations in {t_train:.1f} s ({t_train / iters * 1000:.0f} ms/step), "
        f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    # 5. save, score both checkpoints
    model.save_pretrained(os.path.join(w, "fla_final"))
    with open(a.held_jsonl) as fh:
        held = [json.loads(line)["ids"] for line in fh if line.strip()]
    model.eval()
    own = score_model(torch, model, held)
    del model
    kda_model = AutoModelForCausalLM.from_pretrained(a.kda_hf).cuda().float().eval()
    theirs = score_model(torch, kda_model, held)
    import fla as fla_mod
    with open(os.path.join(w, "fla_scores.json"), "w") as fh:
        json.dump({"fla_final": own, "kda_final": theirs, "seconds_train": t_train,
                   "fla": fla_mod.__version__, "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name(0),
                   "FLA_ONE_CONFIG": os.environ.get("FLA_ONE_CONFIG", "0")}, fh)
    open(os.path.join(w, "fla.done"), "w").close()
    log(f"scored {len(held)} held-out chunks: FLA final {sum(own) / len(own):.5f}, "
        f"kda.c final {sum(theirs) / len(theirs):.5f}")


# ---- report (standard library) ----------------------------------------------------------------

def mean(xs):
    return sum(xs) / len(xs)


def cmd_report(a):
    w = a.work
    kda = read_metrics(os.path.join(w, "kda_ckpt", "metrics.jsonl"))
    fla = read_metrics(os.path.join(w, "fla_metrics.jsonl"))
    iters = max(fla)
    if any(i not in kda for i in range(1, iters + 1)):
        fail("kda.c metrics miss iterations the FLA run has")
    kl = [float(kda[i]["loss"]) for i in range(1, iters + 1)]
    fl = [float(fla[i]["loss"]) for i in range(1, iters + 1)]
    with open(os.path.join(w, "fla_scores.json")) as fh:
        fs = json.load(fh)
    ks = {}
    for name in ("kda_final", "fla_final"):
        with open(os.path.join(w, f"kda_scores_{name}.jsonl")) as fh:
            ks[name] = [json.loads(line)["loss"] for line in fh if line.strip()]
    rows = [1] + list(range(25, iters + 1, 25))
    lines = ["# Loss parity: kda.c vs FLA, KDA-300M from FLA's init, the same chunks", "",
             f"{iters} iterations × {MB} × {SEQ} tokens; {fs['gpu']}; FLA {fs['fla']} "
             f"(FLA_ONE_CONFIG={fs['FLA_ONE_CONFIG']}), torch {fs['torch']}.", "",
             "| iteration | FLA | kda.c | Δ % |", "|---:|---:|---:|---:|"]
    for i in rows:
        lines.append(f"| {i} | {fl[i - 1]:.4f} | {kl[i - 1]:.4f} | "
                     f"{100 * (kl[i - 1] - fl[i - 1]) / fl[i - 1]:+.2f} % |")
    lines += ["", f"Window means ({WINDOW} iterations):", "",
              "| iterations | FLA | kda.c | Δ % |", "|---|---:|---:|---:|"]
    wins, ok_win = [], True
    for s in range(0, iters, WINDOW):
        e = min(s + WINDOW, iters)
        f_, k_ = mean(fl[s:e]), mean(kl[s:e])
        d = (k_ - f_) / f_
        wins.append({"first": s + 1, "last": e, "fla": f_, "kda": k_, "rel": d})
        if s + 1 >= BARS["window_from"] and not abs(d) <= BARS["window_rel"]:
            ok_win = False
        lines.append(f"| {s + 1}–{e} | {f_:.4f} | {k_:.4f} | {100 * d:+.2f} % |")
    it1 = (kl[0] - fl[0]) / fl[0]
    S = {"kda_final": {"kda": mean(ks["kda_final"]), "fla": mean(fs["kda_final"])},
         "fla_final": {"kda": mean(ks["fla_final"]), "fla": mean(fs["fla_final"])}}
    d_kck = S["kda_final"]["fla"] - S["kda_final"]["kda"]
    d_fck = S["fla_final"]["kda"] - S["fla_final"]["fla"]
    d_cross = S["kda_final"]["fla"] - S["fla_final"]["kda"]
    n_held = len(ks["kda_final"])
    lines += ["", f"Cross-scoring on {n_held} unseen {SEQ}-token chunks (mean NLL; bf16 on both "
              "sides: kda score --device cuda, FLA bf16 autocast body + fp32 head):", "",
              "| checkpoint | scored by kda.c | scored by FLA | Δ (FLA − kda.c) |",
              "|---|---:|---:|---:|",
              f"| kda.c final | {S['kda_final']['kda']:.5f} | {S['kda_final']['fla']:.5f} | "
              f"{d_kck:+.2e} |",
              f"| FLA final | {S['fla_final']['kda']:.5f} | {S['fla_final']['fla']:.5f} | "
              f"{-d_fck:+.2e} |", "",
              f"FLA scores kda.c's checkpoint {S['kda_final']['fla']:.5f}, kda.c scores FLA's "
              f"{S['fla_final']['kda']:.5f}: Δ {d_cross:+.2e}."]
    checks = {
        "iteration-1 loss within 1e-3 relative": abs(it1) <= BARS["iter1_rel"],
        f"window means within 0.5 % from iteration {BARS['window_from']}": ok_win,
        "each checkpoint: kda.c and FLA scores within 2e-3": abs(d_kck) <= BARS["cross_abs"] and
        abs(d_fck) <= BARS["cross_abs"],
        "FLA's score of kda.c's checkpoint vs kda.c's of FLA's within 2e-3": abs(d_cross) <=
        BARS["cross_abs"],
    }
    lines += ["", "| bar | result |", "|---|---|"]
    lines += [f"| {k} | {'pass' if v else 'FAIL'} |" for k, v in checks.items()]
    lines += ["", f"Iteration 1: FLA {fl[0]:.5f}, kda.c {kl[0]:.5f} ({100 * it1:+.3f} %); grad "
              f"norm FLA {float(fla[1]['grad_norm']):.4f}, kda.c {float(kda[1]['grad_norm']):.4f}."]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "parity.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "parity.json"), "w") as fh:
        json.dump({"kda_loss": kl, "fla_loss": fl,
                   "kda_grad_norm": [float(kda[i]["grad_norm"]) for i in range(1, iters + 1)],
                   "fla_grad_norm": [float(fla[i]["grad_norm"]) for i in range(1, iters + 1)],
                   "windows": wins, "iter1_rel": it1, "cross": S, "checks": checks,
                   "held_kda_scores": ks, "held_fla_scores": {k: fs[k] for k in S}}, fh)
    print("\n".join(lines))
    return 0 if all(checks.values()) else 3


def main():
    ap = argparse.ArgumentParser(description="FLA side of the kda.c loss-parity benchmark")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--work", required=True)
    r.add_argument("--data", required=True, help="Megatron prefix of the training tokens")
    r.add_argument("--held-jsonl", required=True)
    r.add_argument("--kda-metrics", required=True)
    r.add_argument("--kda-hf", required=True)
    r.add_argument("--config", default=os.path.join(ROOT, "configs", "kda_300M.json"))
    r.add_argument("--yaml", default=os.path.join(HERE, "parity_300M.yaml"))
    r.add_argument("--iters", type=int, default=0, help="0: train_iters of the YAML")
    r.add_argument("--wait-max", type=float, default=480)
    c = sub.add_parser("chunks")
    c.add_argument("--data", required=True)
    c.add_argument("--iters", type=int, default=3)
    c.add_argument("--mb", type=int, default=MB)
    c.add_argument("--seq", type=int, default=SEQ)
    c.add_argument("--seed", type=int, default=SEED)
    h = sub.add_parser("held")
    h.add_argument("--data", required=True)
    h.add_argument("--n", type=int, default=16)
    h.add_argument("--seq", type=int, default=SEQ)
    h.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "run":
        return cmd_run(a)
    if a.cmd == "chunks":
        ch = chunk_table(a.data, a.seq)
        perm = permutation(len(ch), a.seed)
        for it in range(a.iters):
            ids = batch_chunks(perm, it, a.mb)
            print(json.dumps({"iteration": it + 1, "chunks": ids,
                              "first_ids": [int(x) for x in ch[ids[0]][:4]]}))
        return 0
    if a.cmd == "held":
        ch = chunk_table(a.data, a.seq)
        if len(ch) < a.n:
            fail(f"{a.data}: {len(ch)} chunks, fewer than --n {a.n}")
        with open(a.out, "w") as fh:
            for row in ch[:a.n]:
                fh.write(json.dumps({"ids": [int(x) for x in row]}) + "\n")
        return 0
    return cmd_report(a)


if __name__ == "__main__":
    sys.exit(main())
