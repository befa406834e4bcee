"""GPU-only paths: the placements' kernel lookups and CUDA-graph capture."""

from __future__ import annotations

import random

import pytest
import torch
from engram_kernels.lookup import DEDUP_MIN_ROWS

from engram.tables import create_table
from test.kernels.tables import drained, random_table, reference, same_bits

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("placement", ["hbm", "dram"])
def test_placements_use_the_kernels(placement: str) -> None:
    weight, scale = random_table(3000, 64)
    weight[:50:7, 5] = 0x7F  # NaN rows: the GPU and CPU placements give the same bits
    cpu = create_table(placement, weight, scale, device="cpu")
    gpu = create_table(placement, weight, scale, device="cuda")
    decode = torch.randint(0, 50, (4, 48))  # below DEDUP_MIN_ROWS: every row is read
    prefill = torch.randint(0, 50, (DEDUP_MIN_ROWS // 48 + 1, 48))  # dram deduplicates
    for ids in (decode, prefill, decode):
        rows = gpu.lookup(ids.cuda())
        assert rows.device.type == "cuda"
        assert same_bits(rows, cpu.lookup(ids)) and same_bits(rows, reference(weight, scale, ids))
    torch.cuda.synchronize()
    read = gpu.counters.stats()["unique_rows"] + drained(gpu._unique)
    # NOTE: hbm never deduplicates (lookup.uses_dedup): every row it is asked for is read.
    prefill_read = torch.unique(prefill).numel() if placement == "dram" else prefill.numel()
    assert read == 2 * decode.numel() + prefill_read
    assert gpu.counters.stats()["rows_requested"] == 2 * decode.numel() + prefill.numel()
    gpu.close()


@pytest.mark.parametrize("placement", ["hbm", "dram"])
@pytest.mark.parametrize("tokens", [4, DEDUP_MIN_ROWS // 48 + 1])
def test_lookups_replay_in_a_cuda_graph(placement: str, tokens: int) -> None:
    """A captured lookup (plain below DEDUP_MIN_ROWS; above, dram's sorts its ids)
    replays with fresh ids, padding included, and its rows are never reported as read."""
    weight, scale = random_table(5000, 64)
    table = create_table(placement, weight, scale, device="cuda")
    # NOTE: no eager lookup of this shape first: the table warmed its kernels up.
    ids = torch.randint(0, 5000, (tokens, 48), device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = table.lookup(ids)
    for _ in range(3):
        new = torch.randint(0, random.randint(2, 5000), (tokens, 48))
        new[0, :5] = -1  # padding reads as zero rows
        ids.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        assert same_bits(out, reference(weight, scale, new))
    assert table.counters.stats()["unique_rows"] + drained(table._unique) == 0
    table.close()


def test_hot_cache_steps_aside_in_a_cuda_graph() -> None:
    """A dram table behind an HBM hot cache: eager lookups fill and use the cache, a
    captured lookup replays through the wrapped table's kernel with fresh ids."""
    weight, scale = random_table(5000, 64)
    table = create_table("dram", weight, scale, device="cuda", hot_cache_bytes=1 << 20)
    eager = torch.randint(0, 5000, (8, 48))
    for _ in range(3):
        assert same_bits(table.lookup(eager.cuda()), reference(weight, scale, eager))
    assert table.stats()["hot_cache_hits"] > 0
    # NOTE: no eager lookup of this shape first: the table warmed its kernels up.
    ids = torch.randint(0, 5000, (4, 48), device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = table.lookup(ids)
    for _ in range(3):
        ids.copy_(torch.randint(0, 5000, (4, 48)))
        graph.replay()
        torch.cuda.synchronize()
        assert same_bits(out, reference(weight, scale, ids.cpu()))
    table.close()


def test_gpu_lookups_are_timed_on_the_device() -> None:
    """Durations come from CUDA events, read at a later lookup without a sync."""
    from engram.tables.timing import LookupClock

    clock = LookupClock(torch.device("cuda"))
    a = torch.randn(4096, 4096, device="cuda")
    mark = clock.start()
    for _ in range(20):
        a = a @ a / 64  # device work the host does not wait for
    assert clock.stop(mark) == []  # not completed yet: nothing known
    torch.cuda.synchronize()
    got = clock.stop(clock.start())  # the earlier one (this one's may be done too)
    assert got and got[0] > 1e-4
