"""Engram lookups as eager breaks of SGLang's breakable CUDA graphs.

SGLang's breakable backend (``--cuda-graph-backend-decode breakable``, which
``args/graph_policy.py`` selects for ``ssd`` tables and the tiny model) captures a
forward pass as CUDA-graph segments with eager calls between them: a function marked
with upstream's ``eager_on_graph`` ends the segment before it, runs once at capture and
is recorded; every replay runs it again, between the same segments, on the same
arguments. A lookup that reads table files on the host (``ssd``) or goes through the
core library's tables (RAM and HBM caches, counters) cannot be a part of a segment: a
replay would skip it and the next segment would read the rows of the capture.

So each function here writes its result into ``out``, a buffer the caller allocated
inside the segment before the break: the next segment was captured reading that
buffer, and every replay refills it with the rows of the live batch. The inputs
(hash ids, token ids) are the static buffers the graph runner fills before a replay,
or tensors the preceding segment computed from them. Outside a capture (eager
forwards, the ``full`` backend, the CPU engine) each is a plain call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
    eager_on_graph,
    is_in_breakable_cuda_graph,
)

__all__ = ["block_rows_into", "hash_ids_into", "is_in_breakable_cuda_graph", "owned_rows_into"]


def _nothing_at_capture(*_: object, **__: object) -> None:
    """What a lookup break runs while its graph is captured.

    NOTE: the segments are only recorded then, not run: ids computed inside the graph
    (a decode step's hash ids) hold whatever the pool's memory held, and a table would
    refuse them or read rows for nothing. Nothing reads the output of a capture."""


@eager_on_graph(capture_stub=_nothing_at_capture)
def owned_rows_into(embedding: Any, indices: torch.Tensor, out: torch.Tensor) -> None:
    """The rows of ``indices`` this rank's shard of ``embedding`` holds, zeros for the
    rest, into ``out``: a family's ``placed_table.PlacedTable`` (``fill_owned_rows``)."""
    embedding.fill_owned_rows(indices, out)


@eager_on_graph(capture_stub=_nothing_at_capture)
def block_rows_into(blocks: Sequence[Any], hash_ids: torch.Tensor, out: torch.Tensor) -> None:
    """The tiny model: every Engram layer's rows of ``hash_ids`` ``[T, layers, cols]``
    into ``out`` ``[len(blocks), T, cols, head_dim]``, one break for all layers (an
    ``ssd`` step waits for its reads once)."""
    for k, block in enumerate(blocks):
        out[k].copy_(block.lookup(hash_ids[:, block.hash_index]))


@eager_on_graph
def hash_ids_into(hasher: Any, input_ids: torch.Tensor, out: torch.Tensor) -> None:
    """The tiny model under a breakable *prefill* graph: hash the live batch.

    NOTE: an extend's hashing reads per-request lengths and history on the host, which a
    segment would replay with the capture's; the live batch is the one the prefill
    runner publishes for its breaks (as upstream's DeepSeek-V4 hashes there)."""
    from sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph import (
        get_tc_piecewise_forward_context,
    )

    out.copy_(hasher(input_ids, get_tc_piecewise_forward_context().forward_batch))
