"""The Engram counters SGLang's /metrics exports move with real table lookups."""

from __future__ import annotations

import random

import torch
from prometheus_client import REGISTRY
from sglang_engram import table_registry
from sglang_engram.metrics_export import EngramMetrics

from engram.tables import create_table
from test.plugin.tiny import random_table


def _value(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_lookups_move_the_engram_metrics():
    rows, dim = random.randint(100, 300), 64
    table = create_table("hbm", *random_table(rows, dim), head_dim=dim)
    layer = random.randint(0, 40)
    table_registry.clear()  # tables other tests served in this process
    table_registry.add(layer, table)
    metrics = EngramMetrics()
    read_before = _value("sglang:engram_bytes_read_total", tier="hbm")
    try:
        metrics.update()  # adopts the table's counters
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
        assert _value("sglang:engram_rows_requested_total", layer=str(layer)) == requested
        unique += torch.unique(ids[:1]).numel()
        assert _value("sglang:engram_unique_rows_total", layer=str(layer)) == unique
    finally:
        table_registry.clear()
    read = _value("sglang:engram_bytes_read_total", tier="hbm") - read_before
    assert read == unique * (dim + dim // 32)
    assert _value("sglang:engram_lookup_seconds_count") == 3
    assert _value("sglang:engram_table_bytes", tier="hbm") == rows * (dim + dim // 32)
    assert _value("sglang:engram_hot_cache_hit_ratio") == 0.0
