"""Engram lookups under SGLang's breakable CUDA graphs, on the CPU.

The lookups are eager breaks (upstream's ``eager_on_graph``): a capture records them
between segments and every replay runs them again into the buffers the segments read.
A capture needs CUDA; ``SegmentsStandIn`` stands in for the CUDA part only (its
segments capture nothing): SGLang's own ``BreakableCUDAGraphCapture`` splits at our
breaks and records them, and SGLang's ``BreakableCUDAGraph.replay`` runs them. The
test writes the live batch's ids into the static input buffer, as the graph runner
(or the segment before the break) does on a GPU.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig

from test.plugin.test_dsv4 import _hash_ids
from test.plugin.tiny import tiny_config
from test.ssd.helpers import write_checkpoint


@pytest.fixture
def capture(sglang_with_plugin):
    """``capture()``: a (graph, capture context) pair of SGLang's classes, with the
    CUDA graph segments stood in."""
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
        BreakableCUDAGraph,
        BreakableCUDAGraphCapture,
    )

    class SegmentsStandIn(BreakableCUDAGraphCapture):
        """Stand-in for the CUDA graph segments (none here): each segment is empty."""

        def _begin_new_segment(self) -> None:
            self._current_graph = SimpleNamespace(replay=lambda: None)

        def _end_current_segment(self) -> None:
            self.cuda_graph._segments.append(self._current_graph)
            self._current_graph = None

    def build():
        graph = BreakableCUDAGraph()
        return graph, SegmentsStandIn(graph)

    return build


def test_lookups_are_eager_breaks_of_the_breakable_backend(sglang_with_plugin):
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
        breakable_cuda_graph as bcg,
    )
    from sglang_engram.forward import graph_breaks

    for name in ("owned_rows_into", "block_rows_into", "hash_ids_into"):
        fn = getattr(graph_breaks, name)
        assert isinstance(fn, bcg._EagerOnGraphCallable), name
        assert fn.__wrapped__.__module__ == graph_breaks.__name__, name  # our body inside


def test_dsv4_replays_read_the_rows_the_break_fetched(placed, layout, capture):
    """DeepSeek-V4.1's rows through our table (dram behind the HBM hot cache: the same
    ``_owned_rows`` as ssd): captured once, then each replay's rows are the live ids'."""
    index = random.randrange(2)
    served, ref = placed(EngramServerConfig(offload="dram", hot_cache_gb=0.001), index)
    tokens = random.randint(1, 24)
    ids = _hash_ids(layout, index, tokens)  # the graph's static input
    graph, ctx = capture()
    with ctx:
        ids.fill_(-(2**40))  # a capture's ids: the pool's memory, never read at capture
        rows = served._owned_rows(ids)
    assert len(graph._break_fns) == 1 and len(graph._segments) == 2
    ids.copy_(_hash_ids(layout, index, tokens))
    for _ in range(3):
        before = rows.clone()
        ids.copy_(_hash_ids(layout, index, tokens))
        graph.replay()
        want = ref._owned_rows(ids)
        assert torch.equal(rows.view(torch.int16), want.view(torch.int16))
        assert not torch.equal(rows, before)  # fresh rows, not the previous step's
        assert torch.equal(served._owned_rows(ids).view(torch.int16), want.view(torch.int16))


def test_tiny_model_replays_read_ssd_rows_of_the_live_batch(
    sglang_with_plugin, capture, tmp_path: Path
):
    """The tiny model's Engram layers with ssd tables (converted from a checkpoint): one
    break fills every layer's rows; replays equal the eager lookups of the live ids."""
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.forward import graph_breaks
    from sglang_engram.models.engram_qwen3.engram_block import EngramBlock

    from engram.fp8 import dequantize_rows
    from engram.spec import EngramSpec

    fields = tiny_config(layer_ids=(1, 3), n=3, heads=4, head_dim=64)
    model = tmp_path / "model"
    tables = write_checkpoint(model, fields)
    spec = EngramSpec.from_hf_config(SimpleNamespace(**fields))
    config = EngramServerConfig(offload="ssd", ssd_dir=str(tmp_path / "ssd"))
    get_runtime().use_config(config)
    context = create_context(
        ServerArgs(model_path=str(model), device="cpu"),
        role="scheduler",
        ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0),
    )
    with use_context(context):
        blocks = [EngramBlock(spec, layer, 128, 1, get_runtime()) for layer in spec.layer_ids]
        for block in blocks:
            block.open_ssd()
    tokens = random.randint(1, 16)

    def fresh_ids() -> torch.Tensor:
        cols = [
            torch.randint(0, rows, (tokens, spec.n_cols)) for rows in spec.num_embeddings
        ]  # each layer's ids within its own table
        return torch.stack(cols, dim=1)

    def want(hash_ids: torch.Tensor) -> torch.Tensor:
        return torch.stack(
            [
                dequantize_rows(*(t[hash_ids[:, k]] for t in tables[layer]))
                for k, layer in enumerate(spec.layer_ids)
            ]
        )

    hash_ids = torch.full((tokens, len(blocks), spec.n_cols), -(2**40))  # never read
    out = torch.zeros(len(blocks), tokens, spec.n_cols, spec.head_dim, dtype=torch.bfloat16)
    graph, ctx = capture()
    with ctx:
        graph_breaks.block_rows_into(blocks, hash_ids, out)
    assert len(graph._break_fns) == 1
    for _ in range(3):
        hash_ids.copy_(fresh_ids())
        graph.replay()
        assert torch.equal(out.view(torch.int16), want(hash_ids).view(torch.int16))
    for block in blocks:
        block.table.close()


def test_outside_a_capture_the_lookup_is_a_plain_call(placed, layout):
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
        breakable_cuda_graph as bcg,
    )

    served, ref = placed(EngramServerConfig(offload="dram", hot_cache_gb=0.001), 0)
    ids = _hash_ids(layout, 0, random.randint(1, 24))
    assert bcg._current_capture_var.get() is None
    got = served._owned_rows(ids)
    assert torch.equal(got.view(torch.int16), ref._owned_rows(ids).view(torch.int16))
