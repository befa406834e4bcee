"""Read Engram rows from SSD before the forward pass that looks them up.

Row ids depend on token ids alone, so they are known early:

- **at admission**: when the scheduler queues a request, every row its prefill will
  look up follows from the prompt (the request keeps these handles until the batch that
  finishes its prefill has run, then releases them);
- **one decode step ahead**: as soon as a step's tokens are sampled, the rows the next
  step looks up (the n-grams ending at each new token) follow from them.

The scheduler process hashes those tokens with the served model family's
:class:`~sglang_engram.protocol.row_hasher.RowHasher` (``tables.served.hasher()``) and
every table that reads ahead (``ssd``) starts reading the rows in the background; the
lookups take them from the table's read-ahead handles.
Tables that read nothing ahead (hbm, dram) return no handle, and nothing is hashed
when no table reads ahead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engram.rows.read_ahead import ReadAheadHandle
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.tables import served

logger = logging.getLogger(__name__)

# (index of the layer in the hasher's output, table, first global row the table holds)
Target = tuple[int, object, int]
# NOTE: the attribute of an SGLang ``Req`` that holds its prompt's read-ahead handles
# until its prefill has run: a request that is aborted first takes them with it.
PROMPT_HANDLES = "_engram_prompt_handles"


def _targets(runtime: EngramRuntime) -> list[Target]:
    hasher = served.hasher(runtime.tables)
    if hasher is None:
        return []
    layer_ids = hasher.layer_ids
    return [
        (layer_ids.index(entry.layer_id), entry.table, entry.row_start)
        for entry in served.served(runtime.tables)
        # NOTE: an HBM hot-row cache in front passes read_ahead on to its ssd table.
        if entry.layer_id in layer_ids
    ]


def _read_ahead(
    targets: list[Target], row_ids: torch.Tensor, *, urgent: bool = False
) -> list[tuple[object, ReadAheadHandle]]:
    """Start reading ``row_ids`` [T, layers, columns] (global row ids) in each target
    (``urgent``: before the prompts' reads); a TP shard reads only the rows it holds."""
    started = []
    for hash_index, table, row_start in targets:
        local = row_ids[:, hash_index].reshape(-1) - row_start
        local = local[(local >= 0) & (local < table.num_rows)]
        handle = table.read_ahead(local, urgent=urgent) if local.numel() else None
        if handle is not None:  # None: the placement reads nothing ahead
            started.append((table, handle))
    return started


def read_ahead_prompt(runtime: EngramRuntime, token_ids: Sequence[int]) -> list[ReadAheadHandle]:
    """Start reading the rows of ``token_ids`` (a whole prompt, from its start) in every
    table that reads ahead; returns the handles, one per table that started."""
    targets = _targets(runtime)
    if not targets or not token_ids:
        return []
    started = _read_ahead(targets, served.hasher(runtime.tables).prompt_rows(token_ids))
    return [handle for _, handle in started]


def release_prefilled(runtime: EngramRuntime, batch: object) -> int:
    """Release the prompt handles of ``batch``'s requests whose prefill it ran to the end
    (after ``run_batch``: its lookups are done); returns how many. Every lookup searches
    every live handle, so a prefilled prompt's handle only costs."""
    if served.hasher(runtime.tables) is None or not batch.forward_mode.is_extend():
        return 0
    released = 0
    for req in batch.reqs:
        # NOTE: a chunked request still has chunks to run: its handle stays.
        if getattr(req, "is_chunked", 0) or PROMPT_HANDLES not in vars(req):
            continue
        for handle in vars(req).pop(PROMPT_HANDLES):
            handle.release()
            released += 1
    return released


def read_ahead_next_step(
    runtime: EngramRuntime, sequences: Sequence[tuple[Sequence[int], Sequence[int]]]
) -> int:
    """Start reading the rows the next decode step looks up: for each running request
    ``(prompt ids, output ids so far)``, the n-grams ending at its newest token. Releases
    the previous step's handles. Returns how many tables started."""
    targets = _targets(runtime)
    if not targets:
        return 0
    hasher = served.hasher(runtime.tables)
    n = hasher.window
    # NOTE: only the last N tokens matter; slicing keeps this O(N) per request.
    tails = [
        tail
        for prompt, output in sequences
        if (tail := (list(prompt[-n:]) + list(output[-n:]))[-n:])
    ]
    if not tails:
        return 0
    row_ids = hasher.step_rows(tails)
    # NOTE: urgent: the next step looks these up within a step's time, while a queued
    # prompt's rows are not needed before its prefill.
    started = _read_ahead(targets, row_ids, urgent=True)
    # NOTE: one live decode handle per table (the runtime holds them): the next step's
    # handle replaces (releases) the previous one, so handles never pile up in front of
    # the lookups.
    state = runtime.read_ahead
    with state.lock:
        previous = [state.decode_handles.pop(id(table), None) for table, _ in started]
        state.decode_handles.update((id(table), handle) for table, handle in started)
    for handle in previous:
        if handle is not None:
            handle.release()
    return len(started)


def after_add_request_to_queue(runtime: EngramRuntime) -> Callable[..., None]:
    """The AFTER hook on ``Scheduler._add_request_to_queue``: read ahead the rows the
    queued request's prefill will look up (its prompt, plus its outputs when it was
    retracted). A PD decode worker never prefills, so it reads nothing here."""

    def after(result: object, scheduler: object, req: object, *_: object, **__: object) -> None:
        if served.hasher(runtime.tables) is None:
            return  # no table reads ahead: nothing to hash
        try:
            mode = getattr(getattr(scheduler, "disaggregation_mode", None), "name", "NULL")
            if mode == "DECODE" or req.finished():
                return
            handles = read_ahead_prompt(runtime, [*req.origin_input_ids, *req.output_ids])
            # NOTE: a retracted request is queued again: its earlier handles go first.
            for handle in vars(req).pop(PROMPT_HANDLES, []):
                handle.release()
            if handles:
                setattr(req, PROMPT_HANDLES, handles)
        except Exception:  # noqa: BLE001 - a failed read-ahead only costs speed
            logger.exception(
                "sglang-engram: admission read-ahead failed; lookups will read on demand"
            )

    return after


def after_process_batch_result(runtime: EngramRuntime) -> Callable[..., None]:
    """The AFTER hook on ``Scheduler.process_batch_result``: read ahead the next decode
    step's rows of every request that sampled a token in this batch and is still running.

    NOTE: the overlap scheduler launches the next step before it processes this one's
    result, so the rows would arrive after that step looked them up: there
    ``read_ahead.overlap`` reads them from ``run_batch``'s result instead."""

    def after(result: object, scheduler: object, batch: object, *_: object, **__: object) -> None:
        if getattr(scheduler, "enable_overlap", False) or served.hasher(runtime.tables) is None:
            return
        try:
            sequences = [
                (req.origin_input_ids, req.output_ids)
                for req in getattr(batch, "reqs", None) or []
                if req.output_ids and not req.finished()
            ]
            if sequences:
                read_ahead_next_step(runtime, sequences)
        except Exception:  # noqa: BLE001 - a failed read-ahead only costs speed
            logger.exception("sglang-engram: decode read-ahead failed; lookups will read on demand")

    return after


def after_load_model(runtime: EngramRuntime) -> Callable[..., None]:
    """The AFTER hook on ``ModelRunner.load_model``: with ``ssd`` tables and read-ahead on,
    the served model's family builds the read-ahead's hash from what the loaded model
    holds (``ModelFamily.row_hasher``), so the scheduler reads rows before the lookups."""

    def after(result: object, runner: Any, *_: object, **__: object) -> None:
        config = runtime.serving_config()
        if getattr(runner, "is_draft_worker", False) or not config.placement.read_ahead:
            return
        family = runtime.model_facts(runner.model_config.model_path).family
        hasher = family.row_hasher(runner.model) if family is not None and config.prefetch else None
        if hasher is not None:
            served.set_hasher(runtime.tables, hasher)

    return after
