"""The one-step-ahead decode read under SGLang's overlap scheduler (its default).

The overlap scheduler launches step k + 1 before it processes step k's result, so the
AFTER hook on ``process_batch_result`` (:mod:`.ssd`) would learn step k's
tokens after step k + 1 looked its rows up. Here the AFTER hook on
``Scheduler.run_batch`` takes step k's sampled tokens from its result instead:

- the scheduler thread only notes which requests the batch ran (the last tokens they
  have, and how many outputs the scheduler processed so far), never waiting;
- the tokens are read once they reach the host (the result's ``copy_done``): on a
  worker thread on a GPU, at once on SGLang's CPU engine (its forward has finished);
- each request's window adds the tokens sampled by steps whose results the scheduler
  has not processed yet (remembered here), and the rows of the n-grams ending at the
  newest token are read ahead (:func:`.ssd.read_ahead_next_step`).

A window that turns out wrong (a request retracted or finished meanwhile) only reads
rows nobody looks up: lookups check the ids they take from a read-ahead.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any

import torch

from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.read_ahead.ssd import read_ahead_next_step
from sglang_engram.tables import served

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ran:
    """One request of a launched batch, as the scheduler had it at launch."""

    index: int  # its row in the batch's sampled tokens
    rid: str
    prompt_tail: list[int]
    output_tail: list[int]
    outputs: int  # output tokens the scheduler had processed


class OverlapReadAhead:
    """Reads each launched step's next-step rows once its tokens reach the host, in
    launch order (one worker thread when ``threaded``)."""

    def __init__(self, runtime: EngramRuntime, threaded: bool):
        self._runtime = runtime
        # NOTE: rid -> (output position of the first token, tokens sampled from there on
        # that the scheduler may not have processed yet); only the last batch's requests
        self._sampled: dict[str, tuple[int, list[int]]] = {}
        self._queue: queue.Queue[tuple[Any, list[Ran]] | None] | None = None
        if threaded:
            self._queue = queue.Queue()
            threading.Thread(target=self._work, name="engram-read-ahead", daemon=True).start()

    def submit(self, result: Any, ran: list[Ran]) -> None:
        if self._queue is None:
            self._read_ahead(result, ran)
        else:
            self._queue.put((result, ran))

    def drain(self) -> None:
        """Wait until every submitted step was read ahead (or failed)."""
        if self._queue is not None:
            self._queue.join()

    def close(self) -> None:
        """Stop the worker thread after the steps already submitted."""
        if self._queue is not None:
            self._queue.put(None)

    def _work(self) -> None:
        assert self._queue is not None
        while (item := self._queue.get()) is not None:
            try:
                self._read_ahead(*item)
            except Exception:  # noqa: BLE001 - a failed read-ahead only costs speed
                logger.exception("sglang-engram: decode read-ahead failed; lookups read on demand")
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _read_ahead(self, result: Any, ran: list[Ran]) -> None:
        done = getattr(result, "copy_done", None)
        if done is not None:
            done.synchronize()
        tokens = result.next_token_ids
        tokens = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
        sampled, sequences = {}, []
        for r in ran:
            first, pending = self._sampled.get(r.rid, (r.outputs, []))
            # the tokens sampled at positions the scheduler has not processed yet
            unprocessed = pending[r.outputs - first :] if first <= r.outputs else []
            newest = [*unprocessed, int(tokens[r.index])]
            sampled[r.rid] = (r.outputs, newest)
            sequences.append((r.prompt_tail, r.output_tail + newest))
        self._sampled = sampled
        if sequences:
            read_ahead_next_step(self._runtime, sequences)


def read_next_step(runtime: EngramRuntime, result: Any, scheduler: Any, batch: Any) -> None:
    """After ``Scheduler.run_batch`` under the overlap scheduler: read the next decode
    step's rows of the batch's requests once its tokens are sampled (see the module)."""
    hasher = served.hasher(runtime.tables)
    if not getattr(scheduler, "enable_overlap", False) or hasher is None:
        return
    try:
        ran = _launched(result, batch, hasher.window)
        if ran is not None:
            _reader(runtime).submit(result, ran)
    except Exception:  # noqa: BLE001 - a failed read-ahead only costs speed
        logger.exception("sglang-engram: decode read-ahead failed; lookups will read on demand")


def _launched(result: Any, batch: Any, n: int) -> list[Ran] | None:
    """The requests whose next step this batch's tokens decide (with their last ``n``
    tokens), or None."""
    if result is None or getattr(result, "next_token_ids", None) is None:
        return None
    # NOTE: a delayed sample (grammars) is copied later; a speculative step samples
    # several tokens per request: both are left to the lookups.
    if getattr(result, "delay_sample_func", None) is not None:
        return None
    spec = getattr(batch, "spec_algorithm", None)
    mode = batch.forward_mode
    if (spec is not None and not spec.is_none()) or not (mode.is_decode() or mode.is_extend()):
        return None
    return [
        Ran(
            i,
            req.rid,
            list(req.origin_input_ids[-n:]),
            list(req.output_ids[-n:]),
            len(req.output_ids),
        )
        for i, req in enumerate(batch.reqs)
        if not req.finished() and not getattr(req, "is_chunked", 0)
    ]


def _reader(runtime: EngramRuntime) -> OverlapReadAhead:
    state = runtime.read_ahead
    with state.lock:
        if state.overlap is None:
            # NOTE: on a GPU the tokens reach the host after the forward pass, which the
            # scheduler does not wait for; SGLang's CPU engine has finished it already.
            state.overlap = OverlapReadAhead(runtime, threaded=torch.cuda.is_available())
        return state.overlap  # type: ignore[return-value]
