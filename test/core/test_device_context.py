"""SGLang builds models inside ``with torch.device(<gpu>)``: host-side pieces (hashing,
the ssd tier's caches and buffers, dram tables) must stay on the host there. The
``meta`` device stands in for the GPU context (it allocates nothing)."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from engram.tables import create_table
from test.core.test_hashing import random_hasher
from test.core.test_tables import random_table


def test_hashing_stays_on_the_host() -> None:
    hasher = random_hasher(random.Random())
    tokens = torch.randint(0, hasher.vocab_size, (50,))
    want = hasher.hash(tokens)
    with torch.device("meta"):
        got = hasher.hash(tokens.tolist())
        history = hasher.history_row([1, 2])
    assert got.device.type == "cpu" and torch.equal(got, want)
    assert history.device.type == "cpu"


def test_host_tables_built_in_a_device_context_live_on_the_host(tmp_path: Path) -> None:
    weight, scale = random_table()
    reference = create_table("hbm", weight, scale)
    ids = torch.randint(0, weight.shape[0], (40, 6))
    with torch.device("meta"):
        ssd = create_table(
            "ssd", weight, scale, device="cpu", path=tmp_path / "t", ram_cache_bytes=1 << 16
        )
        dram = create_table("dram", weight, scale, device="cpu")
        handle = ssd.read_ahead(ids)
    assert handle.wait()
    handle.release()  # its rows went through the RAM cache: lookups now hit there
    assert dram.weight.device.type == "cpu"
    for table in (ssd, dram):
        got = table.lookup(ids)
        assert torch.equal(got.view(torch.int16), reference.lookup(ids).view(torch.int16))
    assert ssd.stats()["ram_cache_hits"] == torch.unique(ids).numel()
    ssd.close()
