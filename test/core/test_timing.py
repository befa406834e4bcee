"""Lookup durations on the host (the GPU twin is in test/kernels/test_gpu_paths.py)."""

from __future__ import annotations

import time

import torch

from engram.tables import create_table
from engram.tables.timing import LookupClock
from test.core.test_tables import random_table


def test_host_lookups_are_timed_by_wall_clock() -> None:
    clock = LookupClock(torch.device("cpu"))
    mark = clock.start()
    time.sleep(0.02)
    (seconds,) = clock.stop(mark)
    assert 0.02 <= seconds < 5


def test_every_host_lookup_adds_its_time() -> None:
    weight, scale = random_table()
    table = create_table("dram", weight, scale)
    for n in range(1, 4):
        table.lookup(torch.randint(0, weight.shape[0], (64, 8)))
        snap = table.counters.stats()
        assert snap["lookups"] == n and snap["seconds"] > 0
