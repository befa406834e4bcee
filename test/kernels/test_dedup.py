"""Device-side dedup: gathers that read each distinct row once, whichever lane reads it."""

from __future__ import annotations

import random

import pytest
import torch
from engram_kernels import UniqueCounter, gather_dequant

from test.kernels.tables import drained, poisoned, random_table, reference, same_bits


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
    assert drained(counter) == torch.unique(ids).numel()


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

