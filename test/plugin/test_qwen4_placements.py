"""Every ``--engram-offload`` placement of Qwen3.8-Flash-Next's PLE table, built through
upstream's own constructor with the plugin's hooks applied and loaded by upstream's own
``load_weights`` behind the plugin's weight filter, serves upstream's rows bit for bit:
fp8 and bf16, TP 1-4 (uneven shards, a rank that owns no rows). ``hbm`` is upstream's own
table, the oracle; on the CPU engine ``dram`` is too (its pinned-host path needs CUDA);
``ssd`` is ours; ``off`` holds no rows and reads nothing.

At TP > 1 each rank's ``_embed_local_shard`` (the zero-filled rows its ``forward``
all-reduces) is summed in bf16, a stand-in for the all-reduce (it needs a process group),
then scaled by the rank's ``weight_scale`` as ``_embed_ngram_ids`` does.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig
from sglang_engram.tables import served as table_registry
from sglang_engram.tables import weight_filter

from test.core.upstream import tp_context
from test.ssd.ple_checkpoint import PleCheckpoint, load_upstream_embeddings, write_ple_checkpoint

pytestmark = pytest.mark.slow  # upstream's model code, twelve loads per placement


@pytest.fixture(autouse=True)
def eager_upstream() -> Iterator[None]:
    """Upstream's masked gather is ``torch.compile``d: minutes of compiling on a CPU."""
    with torch._dynamo.config.patch(disable=True):
        yield


def _rows(
    ckpt: PleCheckpoint, config: EngramServerConfig, tp: int, ids: dict[int, torch.Tensor]
) -> tuple[dict[int, torch.Tensor], set[str]]:
    """Each layer's rows of ``ids`` served in ``config``'s placement at ``tp`` ranks, and
    the classes serving the ranks' tables."""
    from sglang.srt.runtime_context import use_context

    sums: dict[int, torch.Tensor] = {}
    scales: dict[int, torch.Tensor] = {}
    classes = set()
    for rank in range(tp):
        get_runtime().reset()  # each rank is a process of its own
        get_runtime().use_config(config)
        context = tp_context(tp, rank, model_path=str(ckpt.directory))
        embeddings = load_upstream_embeddings(
            ckpt, context, keep=lambda name: not weight_filter.is_skipped(get_runtime().skips, name)
        )
        with use_context(context), context.parallel.override(tp_group=None):
            for layer, module in embeddings.items():
                table = module.ngram_embedding
                classes.add(type(table).__name__)
                if tp == 1:  # upstream's own whole path, the scale included
                    sums[layer] = module._embed_ngram_ids(ids[layer], None, ids[layer].shape[0])
                    continue
                part = table._embed_local_shard(ids[layer])
                sums[layer] = part if rank == 0 else sums[layer] + part
                scales[layer] = table.weight_scale
    get_runtime().reset()
    if tp == 1:
        return sums, classes
    return {layer: rows * scales[layer] for layer, rows in sums.items()}, classes


def _same(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    nan = theirs.isnan()
    assert torch.equal(ours.isnan(), nan)
    assert torch.equal(ours.view(torch.int16)[~nan], theirs.view(torch.int16)[~nan])


@pytest.mark.parametrize("kind", ["fp8", "bf16"])
def test_every_placement_serves_upstreams_rows_over_tp_1_to_4(
    sglang_with_plugin, tmp_path: Path, kind: str
) -> None:
    # NOTE: 128 + 256 rows: TP 3 leaves a rank with no rows of either table.
    ckpt = write_ple_checkpoint(tmp_path / "ckpt", kind, base=20, parts=random.choice((8, 512)))
    ids = {
        layer: torch.randint(0, table.shape[0], (random.randint(1, 30), 4))
        for layer, table in ckpt.tables.items()
    }
    ssd = EngramServerConfig(offload="ssd", ssd_dir=str(tmp_path / "ssd"))
    for tp in (1, 2, 3, 4):
        want, upstream = _rows(ckpt, EngramServerConfig(offload="hbm"), tp, ids)
        assert upstream == {"VocabParallelEmbedding"}
        dram, classes = _rows(ckpt, EngramServerConfig(offload="dram"), tp, ids)
        assert classes == {"VocabParallelEmbedding"}  # upstream's table on the CPU engine
        got, ours = _rows(ckpt, ssd, tp, ids)
        assert ours == {"PlacedPleTable"}
        for layer in ids:
            _same(dram[layer], want[layer])
            _same(got[layer], want[layer])
        shards = sorted(p.name for p in (tmp_path / "ssd").iterdir() if f"of{tp}" in p.name)
        # a table directory per rank that owns rows: TP 3 has an empty rank per table
        assert len(shards) == (2 * tp - 2 if tp == 3 else 2 * tp) or tp == 1


def test_off_holds_no_rows_and_reads_no_table_tensor(sglang_with_plugin, tmp_path: Path) -> None:
    ckpt = write_ple_checkpoint(tmp_path / "ckpt", "fp8", base=20, parts=8)
    ids = {layer: torch.randint(0, t.shape[0], (5, 4)) for layer, t in ckpt.tables.items()}
    rows, classes = _rows(ckpt, EngramServerConfig(offload="off"), 1, ids)
    assert classes == {"PlacedPleTable"}
    assert all(not bool(r.any()) for r in rows.values())
    assert table_registry.served(get_runtime().tables) == []
    prefix = "model.language_model.layers.1.ple.ple_embedding.ngram_embedding"
    get_runtime().use_config(EngramServerConfig(offload="off"))
    weight_filter.skip_tables(get_runtime().skips, layers={1})
    assert weight_filter.is_skipped(get_runtime().skips, f"{prefix}.shard_0.weight")
    assert weight_filter.is_skipped(get_runtime().skips, f"{prefix}.weight_scale")
    assert not weight_filter.is_skipped(
        get_runtime().skips, prefix.replace("ngram_embedding", "layer_multipliers")
    )
