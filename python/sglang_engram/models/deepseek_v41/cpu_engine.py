"""What DeepSeek-V4's model needs from SGLang's CPU engine, set by the plugin where the
user set nothing, or set something the CPU engine cannot run (each change is logged): the switches that keep upstream off its
TileLang and FlashMLA-prefill kernels, a KV dtype the CPU engine accepts, a full-pool
ratio for a checkpoint without compressed layers, and prefill chunks below the size
that forces FlashMLA's sparse prefill. The CUDA-only ops that remain run as the
plugin's torch stand-ins (``integration/kernel_standin/dsv4``)."""

from __future__ import annotations

import os
from typing import Any

ARCHITECTURE = "DeepseekV4ForCausalLM"
# NOTE: each makes upstream take its torch path: the mHC pre (its load-time prewarm
# too) and post, and the dense attention call for every extend instead of FlashMLA's
# sparse prefill kernel.
ENV_SWITCHES = (
    "SGLANG_OPT_USE_TILELANG_MHC_PRE",
    "SGLANG_OPT_USE_TILELANG_MHC_POST",
    "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL",
)
# NOTE: an extend of more query tokens than upstream's _LARGE_INDEXER_QUERY_THRESHOLD
# (11,673) takes the sparse prefill whatever the switch says; no batch may reach it.
MAX_PREFILL_TOKENS = 8192
# NOTE: with no compressed layer a V4.1 pool has no full-size part, and left unset the
# pool configurator divides by its bytes per token (0); half the pool for the window.
SWA_FULL_TOKENS_RATIO = 0.5


def is_dsv4(hf_config: Any) -> bool:
    return ARCHITECTURE in (hf_config.get("architectures") or ())


def cpu_engine_defaults(server_args: Any) -> list[str]:
    """Set the defaults on ``server_args`` (already resolved by SGLang) and in this
    process's environment, which the scheduler processes inherit; returns what changed."""
    changed = []
    for name in ENV_SWITCHES:
        if name not in os.environ:
            os.environ[name] = "0"
            changed.append(f"{name}=0")
    if server_args.kv_cache_dtype in ("auto", "fp8_e4m3"):
        # NOTE: SGLang's CPU engine refuses an FP8 KV cache without AMX (and for MLA
        # with it), and upstream resolves "auto" to fp8_e4m3 for DeepSeek-V4 after this
        # hook; the plugin builds DeepSeek-V4's pool in its FP8 layout anyway.
        server_args.kv_cache_dtype = "bfloat16"
        changed.append(
            "--kv-cache-dtype bfloat16 (the CPU engine refuses fp8_e4m3; the pool keeps "
            "DeepSeek-V4's FP8 layout, written and read by the stand-ins)"
        )
    if server_args.swa_full_tokens_ratio is None:
        server_args.swa_full_tokens_ratio = SWA_FULL_TOKENS_RATIO
        changed.append(f"--swa-full-tokens-ratio {SWA_FULL_TOKENS_RATIO}")
    for flag in ("chunked_prefill_size", "max_prefill_tokens"):
        value = getattr(server_args, flag)
        if value is None or value <= 0 or value > MAX_PREFILL_TOKENS:
            setattr(server_args, flag, MAX_PREFILL_TOKENS)
            changed.append(
                f"--{flag.replace('_', '-')} {MAX_PREFILL_TOKENS} (larger extends take "
                "FlashMLA's sparse prefill, a CUDA kernel)"
            )
    return changed
