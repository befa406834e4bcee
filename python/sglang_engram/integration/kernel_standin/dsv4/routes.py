"""Hooks that send DeepSeek-V4's CUDA-only calls to the plain-torch stand-ins of this
package, only on SGLang's CPU engine with CPU tensors (:func:`on_cpu_engine`); anywhere
else each calls upstream's own kernel. Each names its op in the log the first time it
runs in a process."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch

from sglang_engram.integration.cpu_serving import cpu_engine_on
from sglang_engram.integration.kernel_standin.dsv4 import DSV4_STANDINS

logger = logging.getLogger(__name__)

_used: set[str] = set()
_lock = threading.Lock()


def on_cpu_engine(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and cpu_engine_on()


def _announce(op: str) -> None:
    with _lock:
        if op in _used:
            return
        _used.add(op)
    logger.warning(
        "sglang-engram: DeepSeek-V4's %s runs as a plain-torch STAND-IN on SGLang's CPU engine: %s",
        op,
        DSV4_STANDINS[op],
    )


def rope_wrapper(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND the model's ``get_rope_wrapper``: for a sliding-window layer (no YaRN
    scaling) on the CPU engine, SGLang's generic RoPE object; upstream's CPU factory only
    builds YaRN's and the layer never calls the object."""
    scaling = kwargs.get("rope_scaling") or {}
    if (
        kwargs.get("device") == "cpu"
        and cpu_engine_on()
        and scaling.get("rope_type") != "deepseek_yarn"
    ):
        _announce("get_rope_wrapper")
        return original(*args, **{**kwargs, "device": None})
    return original(*args, **kwargs)


def rope_inplace(
    original: Callable[..., None],
    q: torch.Tensor,
    k: torch.Tensor | None,
    freqs_cis: torch.Tensor,
    positions: torch.Tensor,
    inverse: bool = False,
) -> None:
    """AROUND ``fused_rope_inplace``: RoPE (or its inverse) of ``q`` and ``k`` in place."""
    if not on_cpu_engine(q):
        return original(q, k, freqs_cis, positions, inverse)
    from sglang_engram.integration.kernel_standin.dsv4.rope import rotate_inplace

    _announce("fused_rope_inplace")
    for x in (q, k):
        if x is not None:
            rotate_inplace(x, freqs_cis, positions, inverse=inverse)
    return None


def k_norm_rope_store(original: Callable[..., None], **kwargs: Any) -> None:
    """AROUND the pool's ``fused_k_norm_rope_flashmla`` (called by keyword): the K
    RMSNorm, RoPE and FP8 paged store of the V4 layout."""
    kv = kwargs["kv"]
    if not on_cpu_engine(kv):
        return original(**kwargs)
    from sglang.kernels.ops.attention.dsv4.kv_layout import KVLayout

    from sglang_engram.integration.kernel_standin.dsv4.k_cache import norm_rope_store

    layout = KVLayout.parse(kwargs.get("layout", KVLayout.V4))
    if layout is not KVLayout.V4 or kwargs.get("q") is not None:
        raise NotImplementedError(
            f"the CPU K-cache stand-in writes the V4 layout without a fused query RoPE (got {layout})"
        )
    _announce("fused_k_norm_rope_flashmla")
    norm_rope_store(
        kv,
        kwargs["kv_weight"],
        kwargs["eps"],
        kwargs["freqs_cis"],
        kwargs["positions"],
        kwargs["out_loc"],
        kwargs["kvcache"],
        kwargs["page_size"],
    )
    return None


def set_k_and_s(
    original: Callable[..., None],
    cls: type,
    pool: Any,
    buf: torch.Tensor,
    loc: torch.Tensor,
    nope_fp8_rope_bf16_pack: Any,
) -> None:
    """AROUND ``SetKAndS.execute``: store an already quantised K (the V4 layout)."""
    if not on_cpu_engine(buf):
        return original(cls, pool, buf, loc, nope_fp8_rope_bf16_pack)
    from sglang_engram.integration.kernel_standin.dsv4.k_cache import store

    _announce("SetKAndS")
    pack = nope_fp8_rope_bf16_pack
    store(buf, loc, pack.k_nope_fp8, pack.k_rope_bf16, pack.scale_k_nope_ue8m0, pool.page_size)
    return None


def no_flashmla_metadata(original: Callable[[], Any]) -> Any:
    """AROUND ``_create_flashmla_metadata``: FlashMLA's tile scheduler is a CUDA library;
    the stand-in attention needs no schedule."""
    if cpu_engine_on():
        _announce("_create_flashmla_metadata")
        return None
    return original()


def torch_sparse_attention(
    result: None, backend: Any, model_runner: Any, *args: Any, **kwargs: Any
) -> None:
    """AFTER ``DeepseekV4AttnBackend.__init__``: on the CPU engine the backend's FlashMLA
    call (set only on CUDA) is the torch sparse attention, over the V4 pages (not
    interleaved)."""
    if not (cpu_engine_on() and backend.device.type == "cpu"):
        return None
    backend._swa_interleaved = False
    backend._flash_mla_with_kvcache = _sparse_decode
    return None


def _sparse_decode(
    *,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    head_dim_v: int,
    softmax_scale: float,
    indices: torch.Tensor,
    topk_length: torch.Tensor | None = None,
    attn_sink: torch.Tensor | None = None,
    extra_k_cache: torch.Tensor | None = None,
    extra_indices_in_kvcache: torch.Tensor | None = None,
    extra_topk_length: torch.Tensor | None = None,
    is_fp8_kvcache: bool = True,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``flash_mla_with_kvcache``'s sparse FP8 call (by keyword, as the backend makes it);
    the schedule arguments are ignored."""
    from sglang_engram.integration.kernel_standin.dsv4.sparse_mla import sparse_decode

    assert is_fp8_kvcache, "the CPU sparse attention stand-in reads the FP8 V4 pages"
    _announce("flash_mla_with_kvcache")
    return sparse_decode(
        q,
        k_cache,
        head_dim_v,
        softmax_scale,
        indices,
        topk_length,
        attn_sink,
        extra_k_cache,
        extra_indices_in_kvcache,
        extra_topk_length,
    )


def split_sinkhorn(
    original: Callable[..., Any], mixes: torch.Tensor, *args: Any, **kwargs: Any
) -> Any:
    """AROUND ``hc_split_sinkhorn`` (TileLang)."""
    if not on_cpu_engine(mixes):
        return original(mixes, *args, **kwargs)
    from sglang_engram.integration.kernel_standin.dsv4.mhc import split_sinkhorn as torch_split

    _announce("hc_split_sinkhorn")
    return torch_split(mixes, *args, **kwargs)


def combine(
    original: Callable[..., torch.Tensor], x_flat: torch.Tensor, *args: Any, **kwargs: Any
) -> torch.Tensor:
    """AROUND ``mhc_combine`` (Triton)."""
    if not on_cpu_engine(x_flat):
        return original(x_flat, *args, **kwargs)
    from sglang_engram.integration.kernel_standin.dsv4.mhc import combine as torch_combine

    _announce("mhc_combine")
    return torch_combine(x_flat, *args, **kwargs)


def fp8_pool_under_bf16(
    original: Callable[..., Any], configurator: Any, *args: Any, **kwargs: Any
) -> Any:
    """AROUND ``KVCacheConfigurator._build_dsv4_kv_pool``: on the CPU engine, whose
    configurator refuses an FP8 KV dtype without AMX, a ``bfloat16`` KV dtype builds
    DeepSeek-V4's pool in the only layout it has off NPUs, FP8 (written and read by the
    stand-ins); every other pool keeps bfloat16."""
    if not (cpu_engine_on() and configurator.kv_cache_dtype == torch.bfloat16):
        return original(configurator, *args, **kwargs)
    configurator.kv_cache_dtype = torch.float8_e4m3fn
    try:
        return original(configurator, *args, **kwargs)
    finally:
        configurator.kv_cache_dtype = torch.bfloat16
