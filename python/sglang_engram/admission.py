"""Read a request's Engram rows from SSD as soon as the scheduler queues it.

Row ids depend on token ids alone, so every row a prompt's prefill will look up is
known at admission, long before its forward pass. The prompt is hashed with the
served model's hasher and each prefetching (``ssd``) table starts reading its rows in
the background; the lookups of the prefill take them from the table's prefetch
handles. Tables without ``prefetch`` (hbm, dram) need no read-ahead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from sglang_engram import table_registry

logger = logging.getLogger(__name__)


def prefetch_prompt(token_ids: Sequence[int]) -> int:
    """Start reading the rows of ``token_ids`` (a whole prompt, from its start) in every
    prefetching table; returns how many tables started."""
    hasher = table_registry.hasher()
    if hasher is None or not token_ids:
        return 0
    targets = []
    for entry in table_registry.served():
        # NOTE: an HBM hot-row cache in front passes prefetch on to its ssd table.
        table = entry.table
        if hasattr(table, "prefetch") and entry.layer_id in hasher.spec.layer_ids:
            targets.append((hasher.spec.layer_ids.index(entry.layer_id), table))
    if not targets:
        return 0
    row_ids = hasher.hash(torch.as_tensor(token_ids, dtype=torch.int64))
    for hash_index, table in targets:
        table.prefetch(row_ids[:, hash_index])
    return len(targets)


def after_add_request_to_queue(
    result: object, scheduler: object, req: object, *_: object, **__: object
) -> None:
    """AFTER ``Scheduler._add_request_to_queue``: prefetch the queued prompt's rows."""
    try:
        prefetch_prompt(getattr(req, "origin_input_ids", None) or [])
    except Exception:  # noqa: BLE001 - a failed read-ahead only costs speed
        logger.exception("sglang-engram: admission prefetch failed; lookups will read on demand")
