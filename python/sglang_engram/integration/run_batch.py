"""The plugin's AFTER hook on ``Scheduler.run_batch``.

SGLang's hook registry patches a target once (a hook registered on a target it already
patched is never applied), so every use of ``run_batch`` runs from this one function, in
this order: a batch whose Engram lookup failed is aborted first
(:mod:`lookup_failures`), then the next decode step's rows are read ahead for the
requests still running (:mod:`sglang_engram.read_ahead.overlap`), then the
prompt read-ahead of the requests whose prefill ran is released
(:func:`sglang_engram.read_ahead.ssd.release_prefilled`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sglang_engram.forward import lookup_failures
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.read_ahead import overlap, ssd

logger = logging.getLogger(__name__)


def after_run_batch(runtime: EngramRuntime) -> Callable[..., None]:
    """The AFTER hook on ``Scheduler.run_batch`` (see the module)."""

    def after(result: Any, scheduler: Any, batch: Any, *_: Any, **__: Any) -> None:
        lookup_failures.abort_failed(runtime.failures, batch)
        overlap.read_next_step(runtime, result, scheduler, batch)
        try:
            ssd.release_prefilled(runtime, batch)
        except Exception:  # noqa: BLE001 - a handle kept only costs memory until evicted
            logger.exception("sglang-engram: releasing prompt read-ahead failed")

    return after
