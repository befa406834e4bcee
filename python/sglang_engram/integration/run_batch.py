"""The plugin's AFTER hook on ``Scheduler.run_batch``.

SGLang's hook registry patches a target once (a hook registered on a target it already
patched is never applied), so every use of ``run_batch`` runs from this one function, in
this order: a batch whose Engram lookup failed is aborted first
(:mod:`lookup_failures`), then the next decode step's rows are read ahead for the
requests still running (:mod:`sglang_engram.lookahead.overlap_read_ahead`), then the
prompt read-ahead of the requests whose prefill ran is released
(:func:`sglang_engram.lookahead.ssd_read_ahead.release_prefilled`).
"""

from __future__ import annotations

import logging
from typing import Any

from sglang_engram.integration import lookup_failures
from sglang_engram.lookahead import overlap_read_ahead, ssd_read_ahead

logger = logging.getLogger(__name__)


def after_run_batch(result: Any, scheduler: Any, batch: Any, *args: Any, **kwargs: Any) -> None:
    lookup_failures.after_run_batch(result, scheduler, batch, *args, **kwargs)
    overlap_read_ahead.after_run_batch(result, scheduler, batch, *args, **kwargs)
    try:
        ssd_read_ahead.release_prefilled(batch)
    except Exception:  # noqa: BLE001 - a handle kept only costs memory until evicted
        logger.exception("sglang-engram: releasing prompt read-ahead failed")
