"""TP shards of a vocabulary-parallel table: each rank's rows are the ones upstream's own
``VocabParallelEmbedding`` gives that rank (built on the meta device in the rank's
runtime context), and the ranks' zero-filled lookups (the plugin's ``owned_rows``, which
every placed table runs) add up to the table's rows."""

from __future__ import annotations

import random

import pytest
import torch

from engram.errors import EngramTableError
from engram.tables.vocab_shards import VocabShard
from test.core.upstream import tp_context

# 1 and 64: one padded slice; 100, 128, 256: a rank past the end at TP 3; others uneven
ROW_COUNTS = (1, 64, 100, 128, 192, 256, 1000, 12_032, 320_001_536)


def _upstream_range(num_rows: int, tp: int, rank: int) -> tuple[int, int]:
    context = tp_context(tp, rank)
    from sglang.srt.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from sglang.srt.runtime_context import use_context

    with use_context(context), torch.device("meta"):
        table = VocabParallelEmbedding(num_rows, 16, params_dtype=torch.float8_e4m3fn)
    indices = table.shard_indices
    return indices.org_vocab_start_index, indices.org_vocab_end_index


@pytest.mark.parametrize("num_rows", [*ROW_COUNTS, random.randint(2, 50_000)])
def test_each_rank_owns_upstreams_rows(num_rows: int) -> None:
    for tp in (1, 2, 3, 4):
        shards = [VocabShard(num_rows, rank, tp) for rank in range(tp)]
        for rank, shard in enumerate(shards):
            assert (shard.start, shard.stop) == _upstream_range(num_rows, tp, rank), (tp, rank)
        assert sum(s.rows for s in shards) == num_rows
    assert [VocabShard(128, r, 3).rows for r in range(3)] == [64, 64, 0]


def test_zero_filled_shard_lookups_add_up_to_the_table() -> None:
    from sglang_engram.forward.placed_table import owned_rows

    table = torch.randn(256, 8).to(torch.bfloat16)
    ids = torch.randint(0, 256, (random.randint(1, 30), 4))
    for tp in (1, 2, 3, 4):
        total = torch.zeros(*ids.shape, 8, dtype=torch.bfloat16)
        for rank in range(tp):
            shard = VocabShard(256, rank, tp)
            if not shard.rows:  # a rank past the end holds no table: its rows are zeros
                continue
            rows, asked = table[shard.start : shard.stop], []

            def lookup(local: torch.Tensor, owned: torch.Tensor, rows=rows, asked=asked):
                asked.append(owned)
                return rows[local]

            part = torch.full((*ids.shape, 8), float("nan"), dtype=torch.bfloat16)
            owned_rows(lookup, ids, shard.start, shard.rows, part)
            owned = (ids >= shard.start) & (ids < shard.stop)
            assert torch.equal(asked[0], owned)  # the table counts only the ids it owns
            assert torch.equal(part[owned], table[ids[owned]]) and not part[~owned].any()
            total += part
        assert torch.equal(total, table[ids])


def test_bad_shards_are_refused() -> None:
    for args in ((0, 0, 1), (10, 2, 2), (10, -1, 2), (10, 0, 0)):
        with pytest.raises(EngramTableError, match="no TP shard"):
            VocabShard(*args)
