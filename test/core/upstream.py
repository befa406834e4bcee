"""Upstream SGLang's CPU Engram and qwen4_exp code: the bit-exact oracle for our library.

Imported only by tests; importing sglang takes a while, so it happens once per session.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any


@functools.cache
def upstream_engram() -> ModuleType:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sglang.srt.layers import engram
    return engram


@functools.cache
def upstream_qwen4_exp() -> ModuleType:
    """``sglang.srt.models.qwen4_exp`` (its config classes are names in it too)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sglang.srt.models import qwen4_exp
    return qwen4_exp


def tp_context(tp_size: int = 1, rank: int = 0, model_path: str = "dummy") -> Any:
    """An SGLang runtime context of TP rank ``rank`` of ``tp_size``, as a scheduler
    process of that rank has (several ranks' contexts can live in one process), serving
    ``model_path``."""
    upstream_qwen4_exp()  # the runtime's modules import quietly with it
    from sglang.srt.runtime_context import SpawnRanks, create_context
    from sglang.srt.server_args import ServerArgs

    return create_context(
        # NOTE: a real qwen4_exp checkpoint resolves its Mamba-state options on the CPU:
        # the snapshot strategy SGLang would pick needs a GPU.
        ServerArgs(
            model_path=model_path,
            tp_size=tp_size,
            device="cpu",
            mamba_radix_cache_strategy="no_buffer",
            disable_overlap_schedule=True,
        ),
        role="scheduler",
        ranks=SpawnRanks(world_rank=rank, dp_rank=None, gpu_id=rank),
    )
