"""Contain a failed Engram table lookup to the requests of its batch.

An ``ssd`` lookup fails when a block of the table does not match its hash (damage on the
disk) or the disk reports an I/O error; the table's other rows are fine. Raised inside
the forward pass, the error would end SGLang's scheduler process and every request in
flight with it. So the plugin's Engram layers look up through :func:`lookup`: on an
``EngramIOError`` it records the error and hands the layer rows of zeros, so that the
forward pass finishes, and the AFTER hook on ``Scheduler.run_batch`` then aborts every
request of that batch with a 500 that names the table and chunk, keeping their KV out
of the radix cache. No output computed from the missing rows reaches a client.

NOTE: only with one TP rank. The ranks of a TP group must finish the same requests at
the same step, and a failure seen by one rank alone (its shard of a DeepSeek-V4.1 table,
or a block only it had not checked yet) would let them diverge: there the error is
raised as before and the server stops.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

import torch

from engram.ssd.faults import EngramIOError
from engram.tables import EngramTable
from sglang_engram.protocol.runtime import FailureState

logger = logging.getLogger(__name__)


def single_rank() -> bool:
    from sglang.srt.runtime_context import get_parallel

    return get_parallel().tp_size == 1


def lookup(
    state: FailureState, table: EngramTable, ids: torch.Tensor, owned: torch.Tensor | None = None
) -> torch.Tensor:
    """``table.lookup(ids, owned)``; rows of zeros, recorded as a failure in ``state``, if
    it fails with an I/O or checksum error on a single-rank server."""
    try:
        return table.lookup(ids, owned)
    except EngramIOError as err:
        if not single_rank():
            raise
        logger.error("sglang-engram: Engram lookup failed, aborting its batch: %s", err)
        with state.lock:
            state.messages.append(str(err))
        return torch.zeros((*ids.shape, table.head_dim), dtype=torch.bfloat16, device=table.device)


def abort_failed(state: FailureState, batch: Any) -> None:
    """After ``Scheduler.run_batch``: abort the batch's requests if a lookup failed."""
    with state.lock:
        failures = list(state.messages)
        state.messages.clear()
    if not failures:
        return
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    message = f"Engram table lookup failed: {failures[0]}"
    for req in getattr(batch, "reqs", None) or []:
        req.skip_radix_cache_insert = True  # its KV was computed without the rows
        if not req.finished():
            req.to_finish = FINISH_ABORT(
                message, HTTPStatus.INTERNAL_SERVER_ERROR, "InternalServerError"
            )
