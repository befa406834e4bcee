"""gather_dequant against the torch reference, on poisoned outputs."""

from __future__ import annotations

import random

import pytest
import torch
from engram_kernels import gather_dequant

from engram.fp8 import pack_rows
from test.kernels.tables import drained, poisoned, random_table, reference, same_bits


@pytest.mark.parametrize("dim", [32, 64, 96, 256])
@pytest.mark.parametrize("dedup", [False, True])
def test_rows_match_reference(device: torch.device, dim: int, dedup: bool) -> None:
    rows = random.randint(50, 400)
    weight, scale = random_table(rows, dim)
    shape = random.choice([(random.randint(1, 300),), (random.randint(1, 9), 48), (2, 3, 5)])
    dtype = random.choice([torch.int32, torch.int64])
    ids = torch.randint(0, rows, shape, dtype=dtype)
    out = poisoned((*shape, dim), torch.bfloat16, device)
    got = gather_dequant(weight.to(device), scale.to(device), ids.to(device), dedup=dedup, out=out)
    assert got.data_ptr() == out.data_ptr() and got.shape == (*shape, dim)
    assert same_bits(got, reference(weight, scale, ids))


@pytest.mark.parametrize("dedup", [False, True])
def test_packed_rows_read_like_separate_arrays(device: torch.device, dedup: bool) -> None:
    weight, scale = random_table(300, 256)
    packed = pack_rows(weight, scale).to(device)  # [rows, 264]
    ids = torch.randint(0, 300, (7, 48), device=device)
    got = gather_dequant(packed[:, :256], packed[:, 256:], ids, dedup=dedup)
    assert same_bits(got, reference(weight, scale, ids.cpu()))


@pytest.mark.parametrize("dedup", [False, True])
def test_padding_ids_give_zero_rows(device: torch.device, dedup: bool) -> None:
    weight, scale = random_table(100, 64)
    ids = torch.randint(0, 100, (200,))
    ids[torch.rand(200) < 0.3] = -1
    out = poisoned((200, 64), torch.bfloat16, device)
    got = gather_dequant(weight.to(device), scale.to(device), ids.to(device), dedup=dedup, out=out)
    assert same_bits(got, reference(weight, scale, ids))
    assert bool((got[ids.to(device) < 0] == 0).all())


def test_empty_batch(device: torch.device) -> None:
    weight, scale = random_table(10, 32)
    out = gather_dequant(
        weight.to(device), scale.to(device), torch.empty(0, 48, dtype=torch.long, device=device)
    )
    assert out.shape == (0, 48, 32)


def test_bad_inputs_are_named(device: torch.device) -> None:
    weight, scale = (t.to(device) for t in random_table(10, 64))
    ids = torch.zeros(4, dtype=torch.long, device=device)
    with pytest.raises(ValueError, match="int32 or int64"):
        gather_dequant(weight, scale, ids.float())
    with pytest.raises(ValueError, match=r"expected \[10, 2\]"):
        gather_dequant(weight, scale[:, :1], ids)
    with pytest.raises(ValueError, match="table weight must be torch.uint8 or"):
        gather_dequant(weight.float(), scale, ids)
    with pytest.raises(ValueError, match="out must be"):
        gather_dequant(
            weight, scale, ids, out=torch.empty(4, 32, dtype=torch.bfloat16, device=device)
        )
    if device.type == "cpu":
        with pytest.raises(ValueError, match="row id 10 is out of range"):
            gather_dequant(weight, scale, torch.tensor([3, 10]))
    else:
        with pytest.raises(ValueError, match="table is on cpu"):
            gather_dequant(weight.cpu(), scale.cpu(), ids)


@pytest.mark.parametrize("host", [False, True])
def test_warm_up_launches_every_variant_without_counting(device: torch.device, host: bool) -> None:
    """What hbm/dram tables run when built: the variants their lookups launch (the sorted
    one only for a host table), so a CUDA-graph capture loads no kernel, counted into
    the scratch counter only."""
    from engram_kernels import UniqueCounter, register_host_table
    from engram_kernels.lookup import DEDUP_MIN_ROWS, counted_lookup, uses_dedup, warm_up

    weight, scale = random_table(random.randint(50, 200), 64)
    handle = None
    if host:
        packed = pack_rows(weight, scale)
        packed = packed.pin_memory() if device.type == "cuda" else packed
        handle = register_host_table(
            packed[:, :64], packed[:, 64:], device=device, min_huge_fraction=0
        )
        w, s = handle.weight, handle.scale
    else:
        w, s = weight.to(device), scale.to(device)
    counter = UniqueCounter(device)
    warm_up(w, s, counter)
    assert drained(counter) == 0  # nothing reported for a lookup nobody asked for
    assert drained(counter.scratch) == (2 + 1 if host else 2)  # 2 ids, 1 distinct
    assert uses_dedup(w, DEDUP_MIN_ROWS) == host and not uses_dedup(w, DEDUP_MIN_ROWS - 1)
    ids = torch.randint(0, weight.shape[0], (40,), device=device)
    rows, read = counted_lookup(w, s, ids, counter)
    assert same_bits(rows, reference(weight, scale, ids.cpu()))
    # below the dedup threshold every row is read (on a GPU the count arrives late)
    assert read + drained(counter) == ids.numel()
    rows, read = counted_lookup(w, s, ids, counter, dedup_min_rows=40)
    assert same_bits(rows, reference(weight, scale, ids.cpu()))
    assert read + drained(counter) == (torch.unique(ids).numel() if host else ids.numel())
    if handle is not None:
        handle.close()
