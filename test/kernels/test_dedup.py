"""Device-side dedup: unique_rows, and gathers that read each distinct row once."""

from __future__ import annotations

import random

import pytest
import torch
from engram_kernels import UniqueCounter, gather_dequant, unique_rows

from engram.errors import EngramInputError
from test.kernels.tables import poisoned, random_table, reference, same_bits


def batches(rows: int) -> dict[str, torch.Tensor]:
    """Batches of 48-row tokens: heavy repetition, Zipf-like, none at all."""
    n = random.randint(3, 12) * 48
    zipf = (torch.rand(n).pow(-1.3).long() - 1).clamp_max(rows - 1)  # rank 0 most frequent
    return {
        "heavy": torch.randint(0, random.randint(1, 6), (n,)),
        "zipf": torch.randperm(rows)[zipf],
        "none": torch.randperm(rows)[:n],
    }


@pytest.mark.parametrize("kind", ["heavy", "zipf", "none"])
def test_unique_rows_and_inverse(device: torch.device, kind: str) -> None:
    ids = batches(5000)[kind].view(-1, 48).to(device)
    unique, inverse = unique_rows(ids)
    assert inverse.shape == ids.shape
    assert torch.equal(unique[inverse], ids)
    assert torch.equal(torch.sort(unique).values, torch.unique(ids))
    # First-occurrence order: the first lane of each distinct id, ascending.
    flat = ids.reshape(-1).cpu()
    first = [flat.tolist().index(u) for u in unique.cpu().tolist()]
    assert first == sorted(first)


def test_unique_rows_skips_padding(device: torch.device) -> None:
    ids = torch.tensor([7, -1, 7, 3, -1, 9, 3], device=device)
    unique, inverse = unique_rows(ids)
    assert unique.tolist() == [7, 3, 9]
    assert inverse.tolist() == [0, -1, 0, 1, -1, 2, 1]


@pytest.mark.parametrize("kind", ["heavy", "zipf", "none"])
@pytest.mark.parametrize("packed", [False, True])
def test_dedup_gather_equals_plain_gather(device: torch.device, kind: str, packed: bool) -> None:
    rows = 5000
    weight, scale = random_table(rows, 64)
    ids = batches(rows)[kind].to(device)
    w, s = weight.to(device), scale.to(device)
    if packed:
        both = torch.cat([w, s], dim=1)
        w, s = both[:, :64], both[:, 64:]
    counter = UniqueCounter(device)
    plain = gather_dequant(w, s, ids, out=poisoned((ids.numel(), 64), torch.bfloat16, device))
    deduped = gather_dequant(
        w, s, ids, dedup=True, unique_counter=counter,
        out=poisoned((ids.numel(), 64), torch.bfloat16, device),
    )  # fmt: skip
    expected = reference(weight, scale, ids.cpu())
    assert same_bits(plain, expected) and same_bits(deduped, expected)
    assert counter.drain() == torch.unique(ids).numel()


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
    assert taken + counter.drain() == expected
    assert counter.take() == 0


def test_unique_rows_rejects_bad_ids(device: torch.device) -> None:
    with pytest.raises(EngramInputError, match="int32 or int64"):
        unique_rows(torch.zeros(3, device=device))
