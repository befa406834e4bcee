"""GPU only: the gathers at prefill sizes and over many random batches, from a 4 Mi-row
table in HBM and in registered host memory, every byte against the torch reference.

These are the cases that faulted on an H200 before the sort-based dedup (>= 12,288
distinct ids with dedup) and that the UVA gather must read in row order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
from engram_kernels import HostTable, alloc_host_buffer, gather_dequant, register_host_table

from engram.fp8 import FP8_BLOCK, dequantize_rows
from test.kernels.tables import random_table, same_bits

pytestmark = pytest.mark.gpu

ROWS = 1 << 22  # 1.1 GB of 264-byte rows in each placement
DIM = 256
PREFILL = 393_216  # 8,192 tokens x 48 rows


@dataclass
class Tables:
    weight: torch.Tensor  # HBM [ROWS, DIM]
    scale: torch.Tensor  # HBM [ROWS, DIM / 32]
    host: HostTable  # the same rows, packed, registered
    expected: torch.Tensor  # bf16 [ROWS + 1, DIM]: the reference of every row, then zeros

    def check(self, ids: torch.Tensor, got: torch.Tensor, what: str) -> None:
        want = self.expected[torch.where((ids >= 0) & (ids < ROWS), ids, ROWS)]
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (what, ids.numel())


@pytest.fixture(scope="module")
def tables() -> Iterator[Tables]:
    weight = torch.randint(0, 256, (ROWS, DIM), dtype=torch.uint8, device="cuda")
    scale = torch.randint(0, 255, (ROWS, DIM // FP8_BLOCK), dtype=torch.uint8, device="cuda")
    packed = alloc_host_buffer(ROWS * (DIM + DIM // FP8_BLOCK)).view(ROWS, -1)
    expected = torch.zeros(ROWS + 1, DIM, dtype=torch.bfloat16, device="cuda")
    chunk = 1 << 18
    for a in range(0, ROWS, chunk):
        w, s = weight[a : a + chunk], scale[a : a + chunk]
        packed[a : a + chunk].copy_(torch.cat([w, s], dim=1))
        expected[a : a + chunk] = dequantize_rows(w, s)
    # NOTE: the reference runs on the GPU here (4 Mi rows on the CPU take minutes); it
    # must agree with the CPU's on a sample of rows first.
    sample = torch.randint(0, ROWS, (20_000,), device="cuda")
    cpu = dequantize_rows(weight[sample].cpu(), scale[sample].cpu())
    assert same_bits(expected[sample], cpu), "the GPU reference differs from the CPU's"
    host = register_host_table(packed[:, :DIM], packed[:, DIM:], device="cuda")
    yield Tables(weight, scale, host, expected)
    host.close()


def ids_of(kind: str, n: int) -> torch.Tensor:
    if kind == "distinct":
        return torch.randperm(ROWS, device="cuda")[:n]
    if kind == "uniform":
        return torch.randint(0, ROWS, (n,), device="cuda")
    if kind == "heavy":  # each id ~4 times, or far more
        return torch.randint(0, max(1, n // random.choice([4, 64, 4096])), (n,), device="cuda")
    if kind == "zipf":
        ranks = torch.rand(n, device="cuda").clamp_min(1e-9).pow(-1.2).clamp_max(ROWS)
        ranks = (ranks.long() - 1).clamp(0, ROWS - 1)
        return torch.randperm(ROWS, device="cuda")[ranks]
    if kind == "same":
        return torch.full((n,), random.randrange(ROWS), device="cuda")
    ids = torch.randint(0, ROWS, (n,), device="cuda")  # padded, and ids past the table
    ids[torch.rand(n, device="cuda") < 0.1] = -1
    ids[torch.rand(n, device="cuda") < 0.01] = ROWS + 5
    return ids


KINDS = ["distinct", "uniform", "heavy", "zipf", "same", "padded"]


@pytest.mark.parametrize("kind", ["distinct", "heavy", "same"])
def test_prefill_batches_in_every_placement(tables: Tables, kind: str) -> None:
    ids = ids_of(kind, PREFILL)
    for name, (w, s) in {
        "hbm": (tables.weight, tables.scale),
        "uva": (tables.host.weight, tables.host.scale),
    }.items():
        for dedup in (True, False):
            got = gather_dequant(w, s, ids, dedup=dedup)
            torch.cuda.synchronize()
            tables.check(ids, got, f"{name} dedup={dedup} {kind}")


def test_a_thousand_random_batches(tables: Tables) -> None:
    """1,000 batches of 3,000-400,000 ids (log-uniform sizes, every kind of id mix),
    through both placements with and without dedup."""
    rng = random.Random()
    for i in range(1000):
        n = int(math.exp(rng.uniform(math.log(3000), math.log(400_000))))
        kind = KINDS[i % len(KINDS)]
        ids = ids_of(kind, n)
        if rng.random() < 0.5:
            ids = ids.to(torch.int32)
        dedup = rng.random() < 0.5
        got = gather_dequant(tables.host.weight, tables.host.scale, ids, dedup=dedup)
        tables.check(ids.long(), got, f"uva dedup={dedup} {kind} batch {i}")
        got = gather_dequant(tables.weight, tables.scale, ids, dedup=not dedup)
        tables.check(ids.long(), got, f"hbm dedup={not dedup} {kind} batch {i}")


def test_pinned_by_torch_reads_like_registered() -> None:
    """A host table the caller pinned with torch is mapped by looking its device address
    up (registering it again fails), and reads the same rows."""
    weight, scale = random_table(50_000, DIM)
    w, s = weight.pin_memory(), scale.pin_memory()
    handle = register_host_table(w, s, device="cuda", min_huge_fraction=0)
    assert [r.registered for r in handle.regions] == [False, False]
    ids = torch.randint(0, 50_000, (30_000,), device="cuda")
    for dedup in (False, True):
        got = gather_dequant(handle.weight, handle.scale, ids, dedup=dedup)
        assert same_bits(got, dequantize_rows(weight[ids.cpu()], scale[ids.cpu()]))
    handle.close()
