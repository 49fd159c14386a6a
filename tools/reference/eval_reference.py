#!/usr/bin/env python3
"""eval_reference.py - per-request loglikelihoods of `kda eval` requests with FLA + transformers.

Input: the requests file written by
    kda eval --model DIR --tasks ... --data ... --dump-requests requests.jsonl
(one JSON line per request: task, doc, idx, gold, context, continuation, olmo, ctx_ids, cont_ids,
norm_len, ll). For every request this script

  1. tokenizes (context, continuation) again with the HF tokenizer by lm-eval's rules
     (TemplateLM._encode_pair: trailing whitespace of the context moves to the continuation,
     whole = enc(context + continuation), ctx = enc(context), cont = whole[len(ctx):]; OLMo
     requests: separate encodings), BOS prepended when --bos, and checks the ids against kda's;
  2. runs the FLA KDAForCausalLM (import fla registers it with transformers) on
     (ctx + cont)[-(max_length + 1):][:-1] and sums log_softmax at the continuation positions,
     in fp32 (default) or like lm-eval's bf16 path (--dtype bfloat16: log_softmax in bf16);
  3. optionally (--lm-eval) asks lm-eval's own HFLM.loglikelihood for the same requests.

Output: JSON lines {task, doc, idx, ll, kda_ll, diff, ids_match, n_ctx, n_cont[, lm_eval_ll]}, then
a summary on stderr: max |ll - kda_ll|, id mismatches, and per task acc and acc_norm both ways
(acc_norm = argmax ll / norm_len, norm_len from the dump) and how many documents' decisions
differ. Exit status 0 only when every id matches, max |ll - kda_ll| <= --tol (default 1e-3, the
issue's bar for kda's fp32 CPU path; a `kda eval --device cuda` dump is bf16: compare it with
--tol 0.5 or against the CPU dump) and acc/acc_norm decisions are identical on every document.

Run on a GPU machine (FLA kernels need CUDA/Triton; docs/eval.md has the full device command):
    pip install flash-linear-attention transformers torch  [lm-eval]
    FLA_ONE_CONFIG=1 python3 tools/reference/eval_reference.py --model out/hf \
        --requests requests.jsonl --out reference.jsonl --bos --max-length 2048
The BOS flag and max length must match the kda run (results.json "settings"). fla_patch.py (next
to this file) is imported first: FLA_ONE_CONFIG=1 skips Triton autotuning, and KDAForCausalLM's
tied head is fixed up for transformers 5.
"""
import argparse
import json
import math
import os
import sys


def encode_pair(tok, context, continuation, separate, bos_id):
    """lm-eval HF backend tokenization of one request; returns (ctx_ids, cont_ids)."""
    if separate:
        ctx = tok.encode(context, add_special_tokens=False)
        cont = tok.encode(continuation, add_special_tokens=False)
    elif context == "":
        prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        return [prefix], tok.encode(continuation, add_special_tokens=False)
    else:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces > 0:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        whole = tok.encode(context + continuation, add_special_tokens=False)
        ctx = tok.encode(context, add_special_tokens=False)
        cont = whole[len(ctx):]
    if bos_id is not None:
        ctx = [bos_id] + ctx
    return ctx, cont


def score(model, torch, ctx, cont, max_length, dtype):
    ids = (ctx + cont)[-(max_length + 1):]
    inp = torch.tensor([ids[:-1]], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=inp).logits[0]  # [T, V]
    if dtype == "float32":
        logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)  # in the logits' dtype, as lm-eval does
    n = min(len(cont), len(ids) - 1)
    targets = torch.tensor(ids[-n:], device=model.device)
    picked = logp[-n:].gather(1, targets[:, None])[:, 0]
    return float(picked.sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF model directory (kda export / FLA format)")
    ap.add_argument("--requests", required=True, help="kda eval --dump-requests output")
    ap.add_argument("--out", required=True, help="per-request loglikelihoods (JSON lines)")
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir or name (default: --model)")
    ap.add_argument("--bos", action="store_true", help="prepend BOS (match kda eval --bos)")
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--limit", type=int, default=0, help="first N requests only")
    ap.add_argument("--lm-eval", action="store_true", help="also score with lm-eval's HFLM")
    ap.add_argument("--tol", type=float, default=1e-3, help="max |ll - kda_ll| allowed (exit 1 above)")
    ap.add_argument("--kda-mode", default="fused_recurrent", choices=["fused_recurrent", "chunk", "model"],
                    help="FLA KDA kernel for the reference (default fused_recurrent: fp32 elementwise "
                         "state updates; 'chunk' uses Triton dots, which run in TF32 on fp32 inputs, "
                         "~1e-3 relative; 'model' keeps the config's attn_mode)")
    args = ap.parse_args()

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fla_patch  # noqa: F401  (before fla: FLA_ONE_CONFIG=1 keeps one autotune config)
    import torch
    import fla  # noqa: F401  (registers KDAForCausalLM with transformers)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    fla_patch.tie_fix()

    tok = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    dtype = torch.float32 if args.dtype == "float32" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype, trust_remote_code=True)
    model = model.to(args.device).eval()
    if args.dtype == "float32":  # a true fp32 reference: no TF32 in torch matmuls or cuDNN convs
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if args.kda_mode != "model":
        for mod in model.modules():  # FLA's KDA layers pick their kernel from .mode
            if hasattr(mod, "mode") and type(mod).__name__ == "KimiDeltaAttention":
                mod.mode = args.kda_mode
    print(f"reference: dtype {args.dtype}, KDA kernel {args.kda_mode}, tf32 off: "
          f"{not torch.backends.cuda.matmul.allow_tf32}", file=sys.stderr)
    bos_id = tok.bos_token_id if args.bos else None
    if args.bos and bos_id is None:
        sys.exit("--bos: the tokenizer has no BOS token")

    reqs = []
    with open(args.requests) as f:
        for line in f:
            if line.strip():
                reqs.append(json.loads(line))
    if args.limit:
        reqs = reqs[: args.limit]

    lm_ll = None
    if args.lm_eval:
        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM
        lm = HFLM(pretrained=model, tokenizer=tok, max_length=args.max_length,
                  add_bos_token=args.bos, batch_size=1)
        inst = [Instance(request_type="loglikelihood", doc={}, arguments=(r["context"], r["continuation"]), idx=i)
                for i, r in enumerate(reqs) if not r.get("olmo")]
        res = iter(lm.loglikelihood(inst))
        lm_ll = [None if r.get("olmo") else next(res)[0] for r in reqs]

    max_diff, mismatches = 0.0, 0
    docs = {}  # (task, doc) -> [gold, [(ll, kda_ll)]]
    with open(args.out, "w") as out:
        for i, r in enumerate(reqs):
            ctx, cont = encode_pair(tok, r["context"], r["continuation"], r.get("olmo", False), bos_id)
            match = ctx == r["ctx_ids"] and cont == r["cont_ids"]
            mismatches += not match
            ll = score(model, torch, ctx, cont, args.max_length, args.dtype)
            diff = ll - r["ll"]
            max_diff = max(max_diff, abs(diff))
            rec = {"task": r["task"], "doc": r["doc"], "idx": r["idx"], "ll": ll, "kda_ll": r["ll"],
                   "diff": diff, "ids_match": match, "n_ctx": len(ctx), "n_cont": len(cont)}
            if lm_ll is not None:
                rec["lm_eval_ll"] = lm_ll[i]
            out.write(json.dumps(rec) + "\n")
            d = docs.setdefault((r["task"], r["doc"]), [r["gold"], []])
            d[1].append((ll, r["ll"], float(r.get("norm_len", len(r["continuation"].strip())))))

    print(f"{len(reqs)} requests: max |ll - kda_ll| = {max_diff:.3g}, token-id mismatches = {mismatches}",
          file=sys.stderr)
    def pick(lls, j, norm):  # numpy.argmax: the first maximum
        key = [x[j] / x[2] if norm else x[j] for x in lls]
        return max(range(len(key)), key=lambda k: (key[k], -k))

    per_task, n_flips = {}, 0
    for (task, _), (gold, lls) in docs.items():
        t = per_task.setdefault(task, [0, 0, 0, 0, 0, 0])  # acc ref/kda, acc_norm ref/kda, n, flips
        for norm in (0, 1):
            a, b = pick(lls, 0, norm), pick(lls, 1, norm)
            t[2 * norm] += a == gold
            t[2 * norm + 1] += b == gold
            t[5] += a != b
        t[4] += 1
    for task, (a, b, an, bn, n, flips) in sorted(per_task.items()):
        n_flips += flips
        print(f"  {task}: acc reference {100 * a / n:.2f} kda {100 * b / n:.2f}; acc_norm reference "
              f"{100 * an / n:.2f} kda {100 * bn / n:.2f}; differing decisions (acc + acc_norm): {flips} "
              f"(n = {n})", file=sys.stderr)
    ok = mismatches == 0 and math.isfinite(max_diff) and max_diff <= args.tol and n_flips == 0
    print(f"{'PASS' if ok else 'FAIL'}: tol {args.tol:g}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
