"""``open_layer_table``: the one way both models open a layer's table."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from sglang_engram.models.engram_qwen3.family import TinyEngram
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig
from sglang_engram.tables import served

from engram.fp8 import dequantize_rows
from engram.ssd.directory import shard_name
from engram.tables import PLACEMENTS
from test.plugin.tiny import tiny_config
from test.ssd.helpers import write_checkpoint

CPU = torch.device("cpu")


@pytest.fixture
def registry():
    """The served-table registry (emptied around each test by ``fresh_runtime``)."""
    return served


def test_off_opens_through_the_registered_class(cpu_context, registry) -> None:
    from sglang_engram.tables.opening import open_layer_table

    layer, rows = random.randint(1, 40), random.randint(1, 999)
    table = open_layer_table(
        get_runtime(),
        EngramServerConfig(offload="off"),
        TinyEngram(),
        layer,
        rows=(0, rows),
        head_dim=64,
        device=CPU,
    )
    assert type(table) is PLACEMENTS["off"] and table.num_rows == rows
    [entry] = registry.served(get_runtime().tables)
    assert entry.table is table and entry.layer_id == layer


def test_ssd_shard_is_converted_once_with_its_share_of_the_caches(
    sglang_with_plugin, registry, tmp_path: Path
) -> None:
    """A TP shard's rows of a checkpoint's layer, converted on the first open and
    reused on the next, behind its share of the hot and RAM caches (the checkpoint
    has two Engram tables)."""
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.tables.opening import open_layer_table

    fields = tiny_config(layer_ids=(1, 3), n=3, heads=4, head_dim=64)
    model = tmp_path / "model"
    tables = write_checkpoint(model, fields)
    layer = random.choice(fields["engram_layer_ids"])
    weight, scale = tables[layer]
    start = random.randint(0, weight.shape[0] // 2)
    stop = random.randint(start + 1, weight.shape[0])
    config = EngramServerConfig(
        offload="ssd", ssd_dir=str(tmp_path / "ssd"), hot_cache_gb=random.uniform(1, 4) / 1024,
        ram_cache_gb=random.uniform(1, 4) / 1024,
    )  # fmt: skip
    context = create_context(
        ServerArgs(model_path=str(model), device="cpu"),
        role="scheduler",
        ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0),
    )
    shard = shard_name(0, 2)
    ids = torch.randint(0, stop - start, (random.randint(1, 300),))
    want = dequantize_rows(weight[start:stop][ids], scale[start:stop][ids])
    directory = tmp_path / "ssd" / f"layer{layer}{shard}"
    stamps = []
    with use_context(context):
        for opening in ("converts", "reuses"):
            table = open_layer_table(
                get_runtime(),
                config,
                TinyEngram(),
                layer,
                rows=(start, stop),
                head_dim=64,
                device=CPU,
                shard=shard,
            )
            stamps.append((directory / "rows.bin").stat().st_mtime_ns)
            assert table.placement == "ssd" and table.num_rows == stop - start, opening
            assert torch.equal(table.lookup(ids).view(torch.int16), want.view(torch.int16))
            stats = table.stats()
            assert 0 < stats["hot_cache_bytes"] <= config.hot_cache_bytes // 2, opening
            assert 0 < stats["ram_cache_bytes"] <= config.ram_cache_bytes // 2, opening
            assert registry.served(get_runtime().tables)[-1].table is table
            assert registry.served(get_runtime().tables)[-1].row_start == start
            table.close()
    assert stamps[0] == stamps[1]  # reused, not written again
