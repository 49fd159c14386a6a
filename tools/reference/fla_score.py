# fla_score.py - FLA's own per-sequence scores for a model directory (GPU; reference for
# `kda score` and for checking that `kda export` output loads in FLA).
#
#   python3 tools/reference/fla_score.py MODEL_DIR INPUTS.jsonl > scores.jsonl
#
# INPUTS: one {"ids": [...]} per line. Output per line: {"tokens": n, "loss": mean NLL of tokens
# 2..n given their prefix (natural log), "sum_nll": ...} - the same fields as `kda score`.
# The model is loaded through transformers' AutoModelForCausalLM after `import fla` (what a user
# does), in fp32, eval mode: FLA then runs fused_recurrent_kda for T <= 64 and chunk_kda above.
# Log-softmax and sums are float64 so only the model's own numerics remain.
import json
import sys

import fla_patch  # noqa: F401  (before fla)
import torch


def main():
    model_dir, inputs = sys.argv[1], sys.argv[2]
    import fla  # noqa: F401  registers model_type "kda"
    from transformers import AutoModelForCausalLM
    fla_patch.tie_fix()
    model = AutoModelForCausalLM.from_pretrained(model_dir).float().cuda().eval()
    print(f"loaded {type(model).__name__} from {model_dir} via AutoModelForCausalLM",
          file=sys.stderr)
    with open(inputs) as fh:
        for line in fh:
            if not line.strip():
                continue
            ids = json.loads(line)["ids"]
            x = torch.tensor([ids], device="cuda")
            with torch.no_grad():
                logits = model(input_ids=x).logits[0, :-1].double()
            lp = torch.log_softmax(logits, -1)
            nll = -lp.gather(1, x[0, 1:, None]).sum().item()
            n = len(ids)
            print(json.dumps({"tokens": n, "loss": nll / (n - 1), "sum_nll": nll}), flush=True)


if __name__ == "__main__":
    main()
