"""Sort-based dedup: gathers that read each distinct row once, in row order, and give
the same bytes as the plain gather and the torch reference whatever repeats."""

from __future__ import annotations

import random

import pytest
import torch
from engram_kernels import UniqueCounter, gather_dequant, register_host_table
from engram_kernels.dedup import search_steps

from engram.fp8 import pack_rows
from test.kernels.tables import drained, poisoned, random_table, reference, same_bits


def batch(kind: str, rows: int, n: int) -> torch.Tensor:
    """``n`` ids of a table of ``rows``: heavy repetition, Zipf-like, none at all, one
    id only, or a mix with padding (-1)."""
    if kind == "heavy":
        return torch.randint(0, random.randint(1, 6), (n,))
    if kind == "zipf":
        ranks = (torch.rand(n).pow(-1.3).long() - 1).clamp_max(rows - 1)  # rank 0 most frequent
        return torch.randperm(rows)[ranks]
    if kind == "none":
        return torch.randperm(rows)[:n]
    if kind == "same":
        return torch.full((n,), random.randrange(rows))
    ids = torch.randint(0, rows, (n,))
    ids[torch.rand(n) < 0.2] = -1
    return ids


@pytest.mark.parametrize("kind", ["heavy", "zipf", "none", "same", "padded"])
@pytest.mark.parametrize("layout", ["separate", "packed", "host"])
def test_dedup_gather_equals_plain_gather(device: torch.device, kind: str, layout: str) -> None:
    rows = 5000
    weight, scale = random_table(rows, 64)
    ids = batch(kind, rows, random.randint(3, 12) * 48).to(device)
    handle = None
    if layout == "separate":
        w, s = weight.to(device), scale.to(device)
    elif layout == "packed":
        both = pack_rows(weight, scale).to(device)
        w, s = both[:, :64], both[:, 64:]
    else:  # a host table read over UVA (the interpreter reads it in place)
        both = (
            pack_rows(weight, scale).pin_memory()
            if device.type == "cuda"
            else pack_rows(weight, scale)
        )
        handle = register_host_table(both[:, :64], both[:, 64:], device=device, min_huge_fraction=0)
        w, s = handle.weight, handle.scale
    counter = UniqueCounter(device)
    plain = gather_dequant(w, s, ids, out=poisoned((ids.numel(), 64), torch.bfloat16, device))
    deduped = gather_dequant(
        w, s, ids, dedup=True, unique_counter=counter,
        out=poisoned((ids.numel(), 64), torch.bfloat16, device),
    )  # fmt: skip
    expected = reference(weight, scale, ids.cpu())
    assert same_bits(plain, expected) and same_bits(deduped, expected)
    assert drained(counter) == torch.unique(ids[ids >= 0]).numel()
    if handle is not None:
        handle.close()


def test_counter_adds_up_over_lookups(device: torch.device) -> None:
    weight, scale = (t.to(device) for t in random_table(1000, 32))
    counter = UniqueCounter(device)
    expected = taken = 0
    for _ in range(4):
        ids = torch.randint(0, random.randint(2, 1000), (random.randint(1, 200),), device=device)
        ids[0] = -1  # padding is not a row read
        gather_dequant(weight, scale, ids, dedup=True, unique_counter=counter)
        expected += torch.unique(ids[ids >= 0]).numel()
        taken += counter.take()
    assert taken + drained(counter) == expected
    assert counter.take() == 0


def test_every_run_length_finds_its_head(device: torch.device) -> None:
    """Runs of every length from 1 to 300 (the binary search's edges: runs crossing
    program boundaries, a run at index 0, one at the end), shuffled."""
    weight, scale = random_table(400, 32)
    lengths = list(range(1, 301))
    ids = torch.repeat_interleave(torch.randperm(400)[:300], torch.tensor(lengths))
    ids = ids[torch.randperm(ids.numel())].to(device)
    got = gather_dequant(weight.to(device), scale.to(device), ids, dedup=True)
    assert same_bits(got, reference(weight, scale, ids.cpu()))


def test_search_steps_cover_every_batch() -> None:
    for n in (1, 2, 3, 4, 5, 1023, 1024, 1025, 393_216):
        assert 2 ** search_steps(n) > n - 1


@pytest.mark.slow
def test_a_hundred_thousand_distinct_ids(device: torch.device) -> None:
    """100,000 distinct rows in one batch, plus 30,000 repeats of them, shuffled, from
    a packed table, with and without dedup."""
    rows = 140_000
    weight, scale = random_table(rows, 256)
    packed = pack_rows(weight, scale).to(device)
    ids = torch.randperm(rows)[:100_000]
    ids = torch.cat([ids, ids[torch.randint(0, ids.numel(), (30_000,))]])
    ids = ids[torch.randperm(ids.numel())]
    expected = reference(weight, scale, ids)
    counter = UniqueCounter(device)
    for dedup in (True, False):
        got = gather_dequant(
            packed[:, :256], packed[:, 256:], ids.to(device), dedup=dedup, unique_counter=counter
        )
        assert same_bits(got, expected), dedup
        assert drained(counter) == (100_000 if dedup else ids.numel())
