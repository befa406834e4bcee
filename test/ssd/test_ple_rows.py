"""A PLE table served from SSD returns upstream's rows, bit for bit.

The oracle is upstream SGLang's own code on the CPU: ``Qwen4ExpNGramEmbedding`` built for
each TP rank in that rank's runtime context, its rows put in place by upstream's own
``Qwen4ExpForConditionalGeneration.load_weights`` (the shard placement, the fp8 switch,
the lossy downcast, the ``weight_scale`` buffer), then at TP 1 its own
``_embed_ngram_ids`` and at TP 2-4 each rank's ``VocabParallelEmbedding`` masked
gather, summed over the ranks in bf16 (a stand-in for the all-reduce, which needs a
process group) and multiplied by ``weight_scale`` as ``_embed_ngram_ids`` does. Ours:
the converted table, each rank's share (:class:`VocabShard`, the empty rank included)
opened as an ``ssd`` table and looked up with the plugin's zero-filling ``owned_rows``,
summed the same way.
NaN: ours is always ``0x7FC0``; upstream's bits vary with the CPU and the position in
a vectorised loop, so NaN is compared by position.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from sglang_engram.forward.placed_table import owned_rows

from engram.row_formats import BF16_ONE_BITS
from engram.ssd.checkpoint import find_checkpoint_tables
from engram.ssd.converter import convert_checkpoint
from engram.ssd.directory import shard_name, table_dir
from engram.ssd.sources import RowRange
from engram.tables import TableOptions, open_table
from engram.tables.vocab_shards import VocabShard
from test.core.upstream import tp_context
from test.ssd.ple_checkpoint import (
    KINDS,
    PleCheckpoint,
    load_upstream_embeddings,
    write_ple_checkpoint,
)

pytestmark = pytest.mark.slow  # imports SGLang's model code once (tens of seconds)


@pytest.fixture(autouse=True)
def eager_upstream() -> Iterator[None]:
    """Upstream's masked gather is ``torch.compile``d: minutes of compiling on a CPU for
    the same ops run eagerly."""
    with torch._dynamo.config.patch(disable=True):
        yield


def _upstream_rows(
    ckpt: PleCheckpoint, tp: int, batches: dict[int, list[torch.Tensor]]
) -> dict[int, list[torch.Tensor]]:
    """Each layer's rows of each batch, as upstream's ranks and all-reduce give them."""
    from sglang.srt.runtime_context import use_context

    sums: dict[int, list] = {layer: [None] * len(b) for layer, b in batches.items()}
    scales = {}
    for rank in range(tp):
        context = tp_context(tp, rank)
        embeddings = load_upstream_embeddings(ckpt, context)
        with use_context(context), context.parallel.override(tp_group=None):
            for layer, module in embeddings.items():
                scales[layer] = module.ngram_embedding.weight_scale
                for i, ids in enumerate(batches[layer]):
                    if tp == 1:  # upstream's own whole path, the scale included
                        sums[layer][i] = module._embed_ngram_ids(ids, None, ids.shape[0])
                        continue
                    part = module.ngram_embedding._embed_local_shard(ids)
                    sums[layer][i] = part if rank == 0 else sums[layer][i] + part
    if tp == 1:
        return sums
    return {layer: [s * scales[layer] for s in rows] for layer, rows in sums.items()}


def _our_rows(
    ckpt: PleCheckpoint, out: Path, tp: int, batches: dict[int, list[torch.Tensor]]
) -> tuple[dict[int, list[torch.Tensor]], int]:
    """Each layer's rows of each batch from its ssd tables, one per rank, summed (and
    how many ranks own no rows)."""
    sums: dict[int, list] = {layer: [None] * len(b) for layer, b in batches.items()}
    empty = 0
    for layer, source in find_checkpoint_tables(ckpt.directory).tables.items():
        for rank in range(tp):
            shard = VocabShard(source.num_rows, rank, tp)
            table = None
            if shard.rows:
                options = TableOptions(
                    "ssd",
                    head_dim=ckpt.head_dim,
                    num_rows=shard.rows,
                    path=table_dir(out, layer, shard_name(rank, tp)),
                    source=RowRange(source, shard.start, shard.stop) if tp > 1 else source,
                    chunk_bytes=16 << 10,
                )
                table = open_table(options)
            empty += table is None
            for i, ids in enumerate(batches[layer]):
                # NOTE: a rank without rows holds no table and looks up zeros.
                part = torch.zeros((*ids.shape, ckpt.head_dim), dtype=torch.bfloat16)
                if table is not None:
                    owned_rows(table.lookup, ids, shard.start, shard.rows, part)
                sums[layer][i] = part if rank == 0 else sums[layer][i] + part
            if table is not None:
                table.close()
    return sums, empty


def _batches(num_rows: int, heads: int) -> list[torch.Tensor]:
    """Ragged batches of random ids, repeats and every 64-row boundary included."""
    edges = torch.arange(0, num_rows, 64)
    edges = torch.cat([edges, edges - 1, torch.tensor([0, num_rows - 1])]).clamp(0, num_rows - 1)
    batches = []
    for _ in range(4):
        tokens = random.randint(1, 40)
        ids = torch.randint(0, num_rows, (tokens, heads))
        ids[random.randrange(tokens)] = ids[random.randrange(tokens)]  # a repeated token
        batches.append(ids)
    batches.append(edges[: edges.numel() // heads * heads].view(-1, heads))
    return batches


def _assert_same_rows(ours: torch.Tensor, theirs: torch.Tensor, tp: int) -> None:
    nan = theirs.isnan()
    assert torch.equal(ours.isnan(), nan)
    assert torch.equal(ours.view(torch.int16)[~nan], theirs.view(torch.int16)[~nan])
    if tp == 1:  # (a sum of ranks gives whatever NaN bits the addition gives)
        assert bool((ours.view(torch.int16)[nan] == 0x7FC0).all())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "base,parts",
    [(20, 512), (3000, 8)],
    ids=["128+256 rows, empty shards and an empty rank", "12k rows in 8 shards"],
)
def test_ssd_rows_are_upstreams_over_tp_1_to_4(tmp_path: Path, kind: str, base: int, parts: int):
    ckpt = write_ple_checkpoint(tmp_path / "ckpt", kind, base=base, parts=parts)
    found = find_checkpoint_tables(ckpt.directory)
    for layer, source in found.tables.items():
        want = "bf16" if kind == "bf16" else "e4m3-tensor-scale"
        assert (source.row_format.name, source.num_rows) == (want, ckpt.tables[layer].shape[0])
        if kind == "fp8":
            assert source.row_format.scale_bf16_bits == ckpt.scale_bits[layer] != BF16_ONE_BITS
    out = tmp_path / "ssd"
    convert_checkpoint(ckpt.directory, out, chunk_bytes=16 << 10, log=print, show_progress=False)
    batches = {layer: _batches(source.num_rows, 4) for layer, source in found.tables.items()}
    empty_ranks = 0
    for tp in (1, 2, 3, 4):
        ours, empty = _our_rows(ckpt, out, tp, batches)
        theirs = _upstream_rows(ckpt, tp, batches)
        empty_ranks += empty
        for layer in batches:
            for mine, upstream in zip(ours[layer], theirs[layer], strict=True):
                _assert_same_rows(mine, upstream, tp)
    assert empty_ranks == (2 if base == 20 else 0)  # TP 3 of 128 and of 256 rows
