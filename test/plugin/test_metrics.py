"""The Engram counters SGLang's /metrics exports move with real table lookups."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch
from prometheus_client import REGISTRY
from sglang_engram.metrics.exporter import EngramMetrics
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.tables import served as table_registry

from engram.fp8 import quantize_rows
from engram.rows.seed_rows import SeedRows
from engram.tables import create_table
from test.plugin.tiny import random_table


def _value(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture(scope="module")
def metrics():
    """One exporter per process (its metrics live in prometheus_client's registry)."""
    return EngramMetrics(get_runtime())


@pytest.fixture
def layers():
    """Fresh layer labels (the counters of earlier tests stay in the registry)."""
    get_runtime().reset()  # tables other tests served in this process
    yield random.sample(range(1000, 100000), 4)
    get_runtime().reset()


def test_lookups_move_the_engram_metrics(metrics, layers):
    rows, dim = random.randint(100, 300), 64
    table = create_table("hbm", *random_table(rows, dim), head_dim=dim)
    layer = layers[0]
    table_registry.add(get_runtime().tables, layer, table)
    read_before = _value("sglang:engram_bytes_read_total", tier="hbm")
    timed_before = _value("sglang:engram_lookup_seconds_count")
    metrics.export_requests = True
    metrics.update()  # attaches the latency histogram
    ids = torch.randint(0, rows, (random.randint(5, 50), 8))
    table.lookup(ids)
    table.lookup(ids[:3])
    metrics.update()
    requested = ids.numel() + ids[:3].numel()
    unique = torch.unique(ids).numel() + torch.unique(ids[:3]).numel()
    assert _value("sglang:engram_rows_requested_total", layer=str(layer)) == requested
    assert _value("sglang:engram_unique_rows_total", layer=str(layer)) == unique
    # a TP rank other than 0 leaves rows requested to rank 0 (same ids everywhere)
    metrics.export_requests = False
    table.lookup(ids[:1])
    metrics.update()
    metrics.export_requests = True
    assert _value("sglang:engram_rows_requested_total", layer=str(layer)) == requested
    unique += torch.unique(ids[:1]).numel()
    assert _value("sglang:engram_unique_rows_total", layer=str(layer)) == unique
    read = _value("sglang:engram_bytes_read_total", tier="hbm") - read_before
    assert read == unique * (dim + dim // 32)
    assert _value("sglang:engram_lookup_seconds_count") - timed_before == 3
    assert _value("sglang:engram_table_bytes", tier="hbm") == rows * (dim + dim // 32)
    assert _value("sglang:engram_hot_cache_hit_ratio") == 0.0


def test_no_lookup_is_lost_between_updates(metrics, layers):
    """Lookups on other threads while the exporter updates are all exported: it reads
    the tables' counters and never swaps them for new ones."""
    rows, dim = random.randint(100, 300), 64
    tables = {layer: create_table("dram", *random_table(rows, dim)) for layer in layers}
    for layer, table in tables.items():
        table_registry.add(get_runtime().tables, layer, table)
    counters = {layer: table.counters for layer, table in tables.items()}
    done = threading.Event()
    looked_up = dict.fromkeys(layers, 0)

    def look_up(layer: int) -> None:
        while not done.is_set():
            ids = torch.randint(0, rows, (random.randint(1, 20),))
            tables[layer].lookup(ids)
            looked_up[layer] += ids.numel()

    threads = [threading.Thread(target=look_up, args=(layer,)) for layer in layers]
    for thread in threads:
        thread.start()
    try:
        for _ in range(random.randint(20, 40)):
            metrics.update()
    finally:
        done.set()
        for thread in threads:
            thread.join()
    metrics.update()
    for layer, table in tables.items():
        assert table.counters is counters[layer]
        assert _value("sglang:engram_rows_requested_total", layer=str(layer)) == looked_up[layer]


def test_ssd_table_stats_are_exported(metrics, layers, tmp_path):
    rows, dim = random.randint(200, 400), 64
    weight, scale = quantize_rows(torch.randn(rows, dim))
    layer = layers[0]
    table = create_table("ssd", weight, scale, path=tmp_path / "t", ram_cache_bytes=1 << 20)
    try:
        table_registry.add(get_runtime().tables, layer, table)
        ids = torch.randint(0, rows, (random.randint(20, 60),))
        table.lookup(ids)
        table.lookup(ids)  # the second time from the RAM cache
        handle = table.read_ahead(ids[:5])
        table.lookup(ids[:5])
        fresh = torch.randint(0, rows, (random.randint(20, 60),))
        step = table.read_ahead(torch.cat([ids[:3], fresh]), urgent=True)
        assert step.wait(30)
        metrics.update()
        stats = table.stats()
        assert stats["ram_cache_hits"] > 0 and stats["ram_cache_misses"] > 0
        assert stats["ram_cache_decode_ahead_hits"] >= 3  # ids[:3] were in the RAM cache
        for name, key in (
            ("ssd_ram_cache_hits", "ram_cache_hits"),
            ("ssd_ram_cache_misses", "ram_cache_misses"),
            ("ssd_ram_cache_prompt_ahead_hits", "ram_cache_prompt_ahead_hits"),
            ("ssd_ram_cache_prompt_ahead_misses", "ram_cache_prompt_ahead_misses"),
            ("ssd_ram_cache_decode_ahead_hits", "ram_cache_decode_ahead_hits"),
            ("ssd_ram_cache_decode_ahead_misses", "ram_cache_decode_ahead_misses"),
            ("ssd_prefetch_hits", "read_ahead_hits"),
            ("ssd_io_errors", "io_errors"),
            ("ssd_lookup_read_seconds", "lookup_read_seconds"),
            ("ssd_ahead_read_seconds", "ahead_read_seconds"),
            ("ssd_handle_wait_seconds", "handle_wait_seconds"),
        ):
            got = _value(f"sglang:engram_{name}_total", layer=str(layer))
            assert got == pytest.approx(stats[key]), name
        assert stats["lookup_read_seconds"] > 0  # the first lookup read the disk itself
        ratio = stats["ram_cache_hits"] / (stats["ram_cache_hits"] + stats["ram_cache_misses"])
        assert _value("sglang:engram_ssd_ram_cache_hit_ratio") == pytest.approx(ratio)
        table.lookup(ids)
        metrics.update()
        hits = table.stats()["ram_cache_hits"]
        assert hits > stats["ram_cache_hits"]
        assert _value("sglang:engram_ssd_ram_cache_hits_total", layer=str(layer)) == hits
        handle.release()
        step.release()
    finally:
        table.close()


def test_ssd_seeding_is_exported(metrics, layers, tmp_path):
    rows, dim = random.randint(2000, 4000), 64
    weight, scale = quantize_rows(torch.randn(rows, dim))
    layer = layers[0]
    ranked = np.random.default_rng().permutation(rows)[: rows // 2]
    table = create_table(
        "ssd", weight, scale, path=tmp_path / "t", ram_cache_bytes=1 << 20,
        seed=SeedRows(ranked, f"layer {layer}"),
    )  # fmt: skip
    try:
        table_registry.add(get_runtime().tables, layer, table)
        assert table.wait_seeded(60)
        metrics.update()
        stats = table.stats()
        assert 0 < stats["seeded_rows"] <= ranked.size and stats["seed_seconds"] > 0
        for name, key in (("ssd_seeded_rows", "seeded_rows"), ("ssd_seed_seconds", "seed_seconds")):
            got = _value(f"sglang:engram_{name}_total", layer=str(layer))
            assert got == pytest.approx(stats[key]), name
    finally:
        table.close()


DP_ATTENTION = {"dp_size": 2, "enable_dp_attention": True}
PREFILL_CP = {"attn_cp_size": 2, "enable_prefill_cp": True}


@pytest.mark.parametrize(
    ("parallel", "groups", "cp_all_tokens"),
    [
        ({"tp_size": 2}, 1, False),
        ({"tp_size": 2, **DP_ATTENTION}, 2, False),
        ({"tp_size": 4, **DP_ATTENTION}, 2, False),
        ({"tp_size": 4, **PREFILL_CP}, 2, True),
        ({"tp_size": 4, **PREFILL_CP}, 1, False),
    ],
    ids=["tp2", "tp2-dp2-attn", "tp4-dp2-attn", "tp4-cp2-prefill", "tp4-cp2-decode"],
)
def test_upstream_tables_export_each_id_once_over_the_ranks(
    sglang_with_plugin, metrics, layers, parallel, groups, cp_all_tokens
):
    """Tables upstream's EngramEmbedding serves (DeepSeek-V4.1 hbm), one exporter per
    rank as on a server: rows requested and read add up, over every rank's export, to
    the ids of all rank groups, each once (a DP group's ranks share its ids; so do a
    CP rank's in a prefill-CP lookup, and every rank otherwise). Stand-in: the ranks'
    contexts live in this process and each rank counts its lookup as the
    Engram.embed_rows hook does (upstream's collective lookup needs the TP group)."""
    from types import SimpleNamespace

    from sglang.srt.layers.engram import EngramLayout
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding
    from sglang_engram.protocol.server_config import EngramServerConfig

    from test.plugin.tiny import engram_fields

    layout = EngramLayout.from_config(
        SimpleNamespace(**engram_fields(layer_ids=(1, 14), n=3, heads=4, head_dim=64))
    )
    layer = layers[0]
    args = (layout.num_embeddings[0], layout.head_dim, layer, layout.column_bounds(0))
    tp_size = parallel["tp_size"]
    group_ids = [random.randint(1, 40) * 6 for _ in range(groups)]  # ids per rank group
    before = {
        "rows": _value("sglang:engram_rows_requested_total", layer=str(layer)),
        "unique": _value("sglang:engram_unique_rows_total", layer=str(layer)),
    }
    kept = []  # NOTE: alive to the end: the exporter keys its snapshots by id(counters)
    for rank in range(tp_size):
        server_args = ServerArgs(model_path="dummy", **parallel)
        ranks = SpawnRanks(world_rank=rank, dp_rank=None, gpu_id=rank)
        context = create_context(server_args, role="scheduler", ranks=ranks)
        get_runtime().use_config(
            EngramServerConfig(offload="hbm")
        )  # each rank: a process of its own
        with use_context(context):
            kept.append(PlacedEngramEmbedding(*args))
            table = table_registry.served(get_runtime().tables)[-1].table
            group = rank * groups // tp_size
            table.record(group_ids[group], table.start(), cp_all_tokens)
            metrics.export_requests = rank == 0  # as after_init_metrics_collector sets it
            metrics.update()
        get_runtime().reset()
    metrics.export_requests = True
    rows = _value("sglang:engram_rows_requested_total", layer=str(layer)) - before["rows"]
    unique = _value("sglang:engram_unique_rows_total", layer=str(layer)) - before["unique"]
    assert rows == sum(group_ids) and unique == sum(group_ids)
