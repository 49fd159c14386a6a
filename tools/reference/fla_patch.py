# fla_patch.py - make FLA usable in a short GPU lease: import this before `import fla`.
#
# FLA's Triton kernels are decorated with triton.autotune over many configs; on a fresh machine
# the first call of each kernel shape compiles and times every config (344 s for one KDA shape
# on an H200). With FLA_ONE_CONFIG=1 each autotuner keeps only its first config: the math is
# the same (configs choose tiling, warps and pipelining, not the algorithm), compile time drops
# by the number of configs. Also ties KDAForCausalLM's head under transformers 5, which expects
# _tied_weights_keys as a dict.
import os

if os.environ.get("FLA_ONE_CONFIG") == "1":
    import triton

    _autotune = triton.autotune

    def _first_config_only(configs, key, *args, **kwargs):
        return _autotune(list(configs)[:1], key, *args, **kwargs)

    triton.autotune = _first_config_only


def tie_fix():
    import transformers
    from fla.models import KDAForCausalLM
    if int(transformers.__version__.split(".")[0]) >= 5 and isinstance(
            getattr(KDAForCausalLM, "_tied_weights_keys", None), list):
        KDAForCausalLM._tied_weights_keys = {"lm_head.weight": "model.embeddings.weight"}
