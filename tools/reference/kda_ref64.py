# kda_ref64.py - independent float64 PyTorch implementation of the KDA language model.
#
# Written from the project's specification (kda-model.md section 5), not from FLA's code:
# every step below names the section it implements. Everything runs in float64 on the CPU (or
# any device given) with plain torch ops, so torch.autograd provides exact (float64) gradients
# of the whole model or of the KDA core op.
#
# Weights are read by FLA state_dict names (kda-model.md section 3) from a dict of tensors,
# e.g. the contents of an FLA `save_pretrained` directory (config.json + model.safetensors).
#
# Library use:
#   cfg = load_config("dir/config.json")       # dict, FLA KDAConfig keys
#   params = load_params("dir", dtype=torch.float64)   # name -> tensor
#   logits = model_forward(params, cfg, ids)   # ids [B, T] int64 -> [B, T, n_vocab] float64
#   loss = lm_loss(logits, ids)                # shifted-label mean cross-entropy (section 5.7)
#   o = kda_op(q_raw, k_raw, v, f, b, A_log, dt_bias, ...)  # KDA core, section 5.3 steps 6-10
#
# CLI (per-sequence score of an FLA checkpoint on a jsonl of {"ids": [...]}):
#   python3 kda_ref64.py score MODEL_DIR INPUTS.jsonl > out.jsonl

import json
import os
import sys

import torch
import torch.nn.functional as F

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# configuration (section 1.1, 9.1)

def derived_dims(cfg):
    """Return a dict with D, L, H, HV, K, V, I, W, n_vocab, eps, tied, neg, lb, conv."""
    D = int(cfg["hidden_size"])
    H = int(cfg["num_heads"])
    HV = int(cfg.get("num_v_heads") or H)
    K = int(cfg["head_dim"])
    V = int(K * float(cfg.get("expand_v", 1.0)))
    I = cfg.get("intermediate_size")
    if I is None:  # section 5.6: int(D * ratio * 2/3) rounded up to a multiple of 256
        I = int(D * float(cfg.get("hidden_ratio", 4)) * 2 / 3)
        I = 256 * ((I + 255) // 256)
    if HV % H != 0:
        raise ValueError(f"num_v_heads {HV} is not a multiple of num_heads {H}")
    return {
        "D": D, "L": int(cfg["num_hidden_layers"]), "H": H, "HV": HV, "K": K, "V": V,
        "I": int(I), "W": int(cfg.get("conv_size", 4)), "n_vocab": int(cfg["vocab_size"]),
        "eps": float(cfg.get("norm_eps", 1e-6)),
        "tied": bool(cfg.get("tie_word_embeddings", False)),
        "neg": bool(cfg.get("allow_neg_eigval", False)),
        "lb": cfg.get("lower_bound"),
        "conv": bool(cfg.get("use_short_conv", True)),
    }


def load_config(path):
    with open(path) as fh:
        return json.load(fh)


def load_params(model_dir, dtype=F64, device="cpu"):
    """Read model.safetensors of an FLA save_pretrained directory; every tensor -> dtype."""
    from safetensors.torch import load_file
    raw = load_file(os.path.join(model_dir, "model.safetensors"))
    return {n: t.to(device=device, dtype=dtype) for n, t in raw.items()}


# ---------------------------------------------------------------------------------------------
# elementary operators

def rmsnorm(x, w, eps):
    """Section 5.2: x * (mean(x^2) + eps)^-1/2 * w over the last axis."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def causal_conv_silu(p, w):
    """Section 5.3 step 2. p [B, T, C], w [C, 1, W]; tap W-1 multiplies the current token."""
    B, T, C = p.shape
    W = w.shape[-1]
    padded = F.pad(p, (0, 0, W - 1, 0))  # W-1 zero rows before the first token
    acc = torch.zeros_like(p)
    for i in range(W):
        acc = acc + w[:, 0, i] * padded[:, i:i + T, :]
    return F.silu(acc)


def l2norm(x, eps=1e-6):
    """Section 5.3 step 6: x / sqrt(||x||^2 + eps) over the last axis (eps inside the root)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def softplus20(a):
    """softplus with threshold 20 (a > 20 -> a), section 5.3 step 8."""
    return torch.where(a > 20, a, torch.log1p(torch.exp(torch.clamp(a, max=20.0))))


def kda_gate(f, A_log, dt_bias, lower_bound=None):
    """Section 5.3 step 8 / 5.8. f [B, T, HV, K] raw gate; A_log [HV]; dt_bias [HV*K].
    Returns the log-decay g [B, T, HV, K]."""
    HV, K = f.shape[-2:]
    a = f + dt_bias.view(HV, K)
    A = torch.exp(A_log).view(HV, 1)
    if lower_bound is None:
        return -A * softplus20(a)
    return float(lower_bound) * torch.sigmoid(A * a)


def kda_beta(b, allow_neg_eigval=False):
    """Section 5.3 step 7: beta = s * sigmoid(b), s = 2 with allow_neg_eigval."""
    return (2.0 if allow_neg_eigval else 1.0) * torch.sigmoid(b)


def kda_recurrence(q, k, v, g, beta, scale, initial_state=None):
    """Section 5.3 step 10, per token. q, k [B, T, H, K] (normalized), v [B, T, HV, V],
    g [B, T, HV, K] log-decay, beta [B, T, HV]. Returns o [B, T, HV, V] and the final
    state [B, HV, K, V] (math layout S in R^{K x V})."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // H
    q = q.repeat_interleave(G, dim=2)  # value head j uses q/k head j // G (section 5.8)
    k = k.repeat_interleave(G, dim=2)
    S = q.new_zeros(B, HV, K, V) if initial_state is None else initial_state
    outs = []
    for t in range(T):
        St = torch.exp(g[:, t]).unsqueeze(-1) * S                     # decay rows of S
        kt = k[:, t]
        r = torch.einsum("bhk,bhkv->bhv", kt, St)                       # prediction
        delta = beta[:, t].unsqueeze(-1) * (v[:, t] - r)                # delta
        S = St + kt.unsqueeze(-1) * delta.unsqueeze(-2)                 # rank-1 update
        outs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, t], S))  # post-update read
    return torch.stack(outs, dim=1), S


def kda_op(q_raw, k_raw, v, f, b, A_log, dt_bias, scale=None, allow_neg_eigval=False,
           lower_bound=None, initial_state=None):
    """The KDA core as FLA's chunk_kda computes it with all in-kernel options on
    (L2 norm, gate, beta sigmoid): section 5.3 steps 6-10. Shapes as kda_recurrence with
    raw q/k, raw gate f [B, T, HV, K] and beta logits b [B, T, HV]."""
    K = q_raw.shape[-1]
    if scale is None:
        scale = K ** -0.5
    q = l2norm(q_raw)
    k = l2norm(k_raw)
    g = kda_gate(f, A_log, dt_bias, lower_bound)
    beta = kda_beta(b, allow_neg_eigval)
    return kda_recurrence(q, k, v, g, beta, scale, initial_state)


# ---------------------------------------------------------------------------------------------
# model (sections 5.3 - 5.7)

def kda_layer(P, pre, x, d):
    """Section 5.3: KDA sublayer on normalized input x [B, T, D]; P params, pre name prefix."""
    B, T, _ = x.shape
    H, HV, K, V = d["H"], d["HV"], d["K"], d["V"]
    pq = x @ P[pre + "q_proj.weight"].T
    pk = x @ P[pre + "k_proj.weight"].T
    pv = x @ P[pre + "v_proj.weight"].T
    if d["conv"]:
        q = causal_conv_silu(pq, P[pre + "q_conv1d.weight"])
        k = causal_conv_silu(pk, P[pre + "k_conv1d.weight"])
        v = causal_conv_silu(pv, P[pre + "v_conv1d.weight"])
    else:
        q, k, v = F.silu(pq), F.silu(pk), F.silu(pv)
    f = (x @ P[pre + "f_proj.0.weight"].T) @ P[pre + "f_proj.1.weight"].T
    b = x @ P[pre + "b_proj.weight"].T
    o, _ = kda_op(q.view(B, T, H, K), k.view(B, T, H, K), v.view(B, T, HV, V),
                  f.view(B, T, HV, K), b, P[pre + "A_log"], P[pre + "dt_bias"],
                  allow_neg_eigval=d["neg"], lower_bound=d["lb"])
    z = (x @ P[pre + "g_proj.0.weight"].T) @ P[pre + "g_proj.1.weight"].T + P[pre + "g_proj.1.bias"]
    z = z.view(B, T, HV, V)
    o = rmsnorm(o, P[pre + "o_norm.weight"], d["eps"]) * torch.sigmoid(z)   # step 11
    return o.reshape(B, T, HV * V) @ P[pre + "o_proj.weight"].T              # step 12


def mlp(P, pre, x):
    """Section 5.6: SwiGLU."""
    a = x @ P[pre + "gate_proj.weight"].T
    u = x @ P[pre + "up_proj.weight"].T
    return (F.silu(a) * u) @ P[pre + "down_proj.weight"].T


def head_weight(P, d):
    if d["tied"] or "lm_head.weight" not in P:
        return P["model.embeddings.weight"]
    return P["lm_head.weight"]


def model_forward(P, cfg, ids, return_hidden=False):
    """Sections 5.1-5.7: ids [B, T] int64 -> logits [B, T, n_vocab] in P's dtype."""
    d = derived_dims(cfg)
    h = P["model.embeddings.weight"][ids]
    for i in range(d["L"]):
        pre = f"model.layers.{i}."
        a = kda_layer(P, pre + "attn.", rmsnorm(h, P[pre + "attn_norm.weight"], d["eps"]), d)
        h = h + a
        m = mlp(P, pre + "mlp.", rmsnorm(h, P[pre + "mlp_norm.weight"], d["eps"]))
        h = h + m
    n = rmsnorm(h, P["model.norm.weight"], d["eps"])
    logits = n @ head_weight(P, d).T
    return (logits, n) if return_hidden else logits


def token_nll(logits, ids):
    """Per-target NLL [B, T-1]: target_t = ids_{t+1} (section 5.7)."""
    lse = torch.logsumexp(logits[:, :-1], dim=-1)
    picked = logits[:, :-1].gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return lse - picked


def lm_loss(logits, ids):
    """Mean over all B*(T-1) shifted targets (labels = ids, no ignored labels)."""
    return token_nll(logits, ids).mean()


def params_for_autograd(state, dtype=F64, device="cpu", tied=False):
    """Copy a state_dict into leaf tensors requiring grad. With tied, lm_head.weight (if
    present) is dropped so that the head uses model.embeddings.weight (one leaf)."""
    P = {}
    for n, t in state.items():
        if tied and n == "lm_head.weight":
            continue
        P[n] = t.detach().to(device=device, dtype=dtype).clone().requires_grad_(True)
    return P


def score_sequences(P, cfg, seqs):
    """seqs: list of int lists -> list of dicts {tokens, loss, sum_nll} (float64)."""
    out = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor([s], dtype=torch.long)
            nll = token_nll(model_forward(P, cfg, ids), ids)
            out.append({"tokens": len(s), "loss": float(nll.mean()), "sum_nll": float(nll.sum())})
    return out


def main(argv):
    if len(argv) != 4 or argv[1] != "score":
        sys.stderr.write("usage: kda_ref64.py score MODEL_DIR INPUTS.jsonl\n")
        return 2
    cfg = load_config(os.path.join(argv[2], "config.json"))
    P = load_params(argv[2])
    with open(argv[3]) as fh:
        seqs = [json.loads(line)["ids"] for line in fh if line.strip()]
    for rec in score_sequences(P, cfg, seqs):
        print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
