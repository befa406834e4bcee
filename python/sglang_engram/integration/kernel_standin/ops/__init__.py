"""Plain-torch STAND-INS for the few ``sgl_kernel`` CPU ops the Qwen3.5-family models
(``qwen4_exp``: Qwen3.8-Flash-Next) call on SGLang's CPU engine without AMX.

SGLang's CPU build of ``sgl_kernel`` registers these as ``torch.ops.sgl_kernel.*``
(AVX-512 / AMX C++); ``qwen3_5.py`` binds four of them at import. The ``sgl_kernel``
stand-in calls :func:`register` when it is imported, so that the same names exist, each
a torch implementation of the op's contract (one module per kind: ``norms``,
``gdn_inputs``, ``causal_conv``, ``gated_delta``). Every other op still raises, naming
itself. Never registered where the real package loads. Importing this package imports
neither torch nor the implementations (the names feed the startup log and ``doctor``).
"""

from __future__ import annotations

import importlib

NAMESPACE = "sgl_kernel"
_HERE = __name__

# NOTE: op name -> (implementing module, the arguments it writes in place). The names,
# argument names and argument order are the real ops' (SGLang calls some by keyword).
STANDIN_OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "fused_sigmoid_mul_cpu": ("norms", ("x",)),
    "fused_qk_gemma_rmsnorm_cpu": ("norms", ()),
    "fused_qk_gemma_rmsnorm_with_gate_cpu": ("norms", ()),
    "fused_rmsnorm_gated_cpu": ("norms", ()),
    "fused_qkvzba_split_reshape_cat_contiguous_cpu": ("gdn_inputs", ()),
    "fused_gdn_gating_cpu": ("gdn_inputs", ()),
    "causal_conv1d_fwd_cpu": ("causal_conv", ("conv_states",)),
    "causal_conv1d_update_cpu": ("causal_conv", ("conv_state",)),
    "chunk_gated_delta_rule_cpu": ("gated_delta", ("initial_state",)),
    "fused_sigmoid_gating_delta_rule_update_cpu": ("gated_delta", ("initial_state_source",)),
}


def register() -> tuple[str, ...]:
    """Define every stand-in op as ``torch.ops.sgl_kernel.<name>`` (once per process;
    names already defined are left alone). Returns the names."""
    import torch

    namespace = getattr(torch.ops, NAMESPACE)
    for name, (module, mutates) in STANDIN_OPS.items():
        if not hasattr(namespace, name):
            fn = getattr(importlib.import_module(f"{_HERE}.{module}"), name)
            torch.library.custom_op(f"{NAMESPACE}::{name}", fn, mutates_args=mutates)
    return tuple(STANDIN_OPS)
