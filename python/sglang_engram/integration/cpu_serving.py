"""Serving on SGLang's CPU engine (a machine without a GPU).

Stock SGLang 0.5.23 serves on the CPU with ``SGLANG_USE_CPU_ENGINE=1``: it then picks
``--device cpu``, the ``torch_native`` attention backend on CPUs without AMX, and no
CUDA graphs. Its imports still need ``sgl_kernel``, which :mod:`kernel_standin` provides
where the real one cannot load. This module checks the flags that must agree with that
engine before anything starts.
"""

from __future__ import annotations

import os
from typing import Any

from sglang_engram.protocol.cpu_engine import CPU_ENGINE_VAR, cpu_engine_on


def check_cpu_engine(server_args: Any) -> None:
    """``--device cpu`` runs only on SGLang's CPU engine, which an environment variable
    selects before any argument is parsed: refuse, in one line, to start without it."""
    if getattr(server_args, "device", None) == "cpu" and not cpu_engine_on():
        raise SystemExit(
            f"sglang-engram: error: --device cpu needs SGLang's CPU engine, which "
            f"{CPU_ENGINE_VAR}=1 selects; run {CPU_ENGINE_VAR}=1 python -m "
            "sglang.launch_server --device cpu ..."
        )


# NOTE: upstream's PD paths assume CUDA in three places met on the CPU engine; each
# adjustment below only applies where the user chose nothing else.
EARLY_SEND_VAR = "SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX"


def adjust_for_cpu(server_args: Any) -> list[str]:
    """Defaults of SGLang's PD code that cannot run on the CPU engine, changed to ones that
    can; returns what was changed, one phrase each (logged by the caller)."""
    if getattr(server_args, "device", None) != "cpu":
        return []
    changed = []
    role = getattr(server_args, "disaggregation_mode", "null")
    if role == "decode" and server_args.disaggregation_decode_retraction_backup is None:
        # NOTE: the default resolves to host_pool, a host KV pool pinned with
        # cudaHostRegister. cpu_tensor keeps a retracted request's KV in host tensors (a
        # plain copy on the CPU engine) and resumes it; "none" would answer it 503, and
        # the router's retries of those 503s open its circuit breaker on the pairing.
        server_args.disaggregation_decode_retraction_backup = "cpu_tensor"
        changed.append(
            "--disaggregation-decode-retraction-backup cpu_tensor (host_pool pins with CUDA)"
        )
    if role == "prefill" and EARLY_SEND_VAR not in os.environ:
        # the early send of a prefix-cache hit records a torch.cuda.Event
        os.environ[EARLY_SEND_VAR] = "0"
        changed.append(f"{EARLY_SEND_VAR}=0 (the early send records a CUDA event)")
    return changed


def no_extra_buffer_on_cpu(original: Any, *args: Any, **kwargs: Any) -> bool:
    """AROUND upstream's ``supports_mamba_cache_extra_buffer`` (server-argument resolution):
    ``False`` on the CPU engine.

    NOTE: for a hybrid linear-attention model (``qwen4_exp``, Qwen3.5) left at
    ``--mamba-radix-cache-strategy auto``, upstream picks ``extra_buffer`` when the overlap
    scheduler is on, then refuses it because the CPU platform cannot snapshot mamba state
    ("extra_buffer requires platform support"). With this answer ``auto`` resolves to what
    runs here: ``no_buffer``, which upstream pairs with ``--disable-overlap-schedule``.
    An explicit strategy is untouched."""
    if cpu_engine_on():
        return False
    return original(*args, **kwargs)


def plain_kv_sender() -> None:
    """CALL once ``sglang.srt.disaggregation.mooncake.conn`` is imported: on the CPU engine
    the mooncake sender takes the plain send path (its host-index path pins memory and
    records a ``torch.cuda.Event``)."""
    if cpu_engine_on():
        from sglang.srt.disaggregation.mooncake.conn import MooncakeKVSender

        MooncakeKVSender.supports_host_tensor_indices = False
