# fla_score.py - FLA's own per-sequence scores for a model directory (GPU; reference for
# `kda score` and for checking that `kda export` output loads in FLA).
#
#   python3 tools/reference/fla_score.py MODEL_DIR INPUTS.jsonl [fp32|bf16|autocast] > scores.jsonl
#
# INPUTS: one {"ids": [...]} per line (other keys are ignored). Output per line: {"tokens": n,
# "loss": mean NLL of tokens 2..n given their prefix (natural log), "sum_nll": ...} - the same
# fields as `kda score`. The model is loaded through transformers' AutoModelForCausalLM after
# `import fla` (what a user does), eval mode, in one of three precisions:
#   fp32 (default): every weight and activation fp32; FLA then runs fused_recurrent_kda for
#       T <= 64 and chunk_kda above (TF32 tl.dot inside Triton);
#   bf16: the model converted to bfloat16 (weights and activations bf16, logits bf16): what
#       lm-eval's HF backend does with dtype=bfloat16, the setting of the FLA eval runs;
#   autocast: fp32 weights, the body under torch.autocast(bfloat16), the head in fp32 (the
#       cross-scoring convention of bench/parity, closest to `kda score --precision bf16`).
# Log-softmax and sums are float64 so only the model's own numerics remain.
import json
import sys

import fla_patch  # noqa: F401  (before fla)
import torch


def main():
    model_dir, inputs = sys.argv[1], sys.argv[2]
    dtype = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    if dtype not in ("fp32", "bf16", "autocast"):
        sys.exit(f"fla_score.py: precision must be fp32, bf16 or autocast, got '{dtype}'")
    import fla  # noqa: F401  registers model_type "kda"
    from transformers import AutoModelForCausalLM
    fla_patch.tie_fix()
    model = AutoModelForCausalLM.from_pretrained(model_dir).float().cuda().eval()
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    print(f"loaded {type(model).__name__} from {model_dir} via AutoModelForCausalLM, {dtype}",
          file=sys.stderr)
    W = model.lm_head.weight.float()
    with open(inputs) as fh:
        for line in fh:
            if not line.strip():
                continue
            ids = json.loads(line)["ids"]
            x = torch.tensor([ids], device="cuda")
            with torch.no_grad():
                if dtype == "autocast":
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        h = model.model(input_ids=x, use_cache=False)[0]
                    logits = (h.float() @ W.T)[0, :-1].double()
                else:
                    logits = model(input_ids=x).logits[0, :-1].double()
            lp = torch.log_softmax(logits, -1)
            nll = -lp.gather(1, x[0, 1:, None]).sum().item()
            n = len(ids)
            print(json.dumps({"tokens": n, "loss": nll / (n - 1), "sum_nll": nll}), flush=True)


if __name__ == "__main__":
    main()
