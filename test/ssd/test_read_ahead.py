"""Prefetch really reads ahead: the rows' pages are resident (mincore) before the lookup,
and the lookup then reads nothing from the file."""

from __future__ import annotations

import mmap
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from engram_testing.plain import first_pages

from engram.rows.read_ahead import MAX_LIVE_HANDLES
from engram.ssd.layout import DiskLayout
from engram.ssd.sysmem import mincore
from engram.tables import create_table
from engram.tables.ssd import AHEAD_READ_ROWS
from test.ssd.gated_reader import GatedReader
from test.ssd.helpers import random_table

ROWS, DIM = 40_000, 256
LAYOUT = DiskLayout(ROWS, DIM)


def _resident_pages(path: Path) -> np.ndarray:
    """Page-cache residency of every page of ``path`` (a fresh mapping: faults nothing in)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = np.frombuffer(mm, dtype=np.uint8)
        try:
            return (mincore(view.ctypes.data, len(mm)) & 1).astype(bool)
        finally:
            del view


@pytest.mark.parametrize("keep_rows", [True, False], ids=["rows-in-handle", "page-cache-only"])
def test_prefetch_reads_the_pages_before_the_lookup(tmp_path: Path, keep_rows: bool) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table(
        "ssd", weight, scale, path=tmp_path / "t", read_ahead_bytes=(64 << 20) if keep_rows else 0
    )
    data = tmp_path / "t" / "rows.bin"
    table.drop_page_cache()
    assert table.resident_fraction() < 0.01
    ids = torch.randint(0, ROWS, (64, 48))
    pages = np.unique(first_pages(LAYOUT, ids.flatten().numpy()))
    assert not _resident_pages(data)[pages].any()

    handle = table.read_ahead(ids)
    assert handle.wait(timeout=30)
    assert _resident_pages(data)[pages].all()
    assert (handle.rows is not None) == keep_rows
    read_ahead = table.stats()["pages_requested"]
    assert read_ahead >= pages.size

    assert torch.equal(table.lookup(ids), dram.lookup(ids))
    stats = table.stats()
    assert stats["pages_requested"] == read_ahead  # the lookup read nothing more
    distinct = torch.unique(ids).numel()
    assert stats["read_ahead_hits"] == (distinct if keep_rows else 0)
    table.close()


def test_prefetch_budget_releases_the_oldest_handles(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    row_bytes = LAYOUT.row_bytes
    table = create_table(
        "ssd", weight, scale, path=tmp_path / "t", read_ahead_bytes=3000 * row_bytes
    )
    first = table.read_ahead(torch.randperm(ROWS)[:2000])
    assert first.wait(timeout=30) and table.stats()["read_ahead_bytes_held"] == 2000 * row_bytes
    second = table.read_ahead(torch.randperm(ROWS)[:1500])
    assert second.wait(timeout=30)
    assert first.released and first.rows is None
    assert table.stats()["read_ahead_bytes_held"] == 1500 * row_bytes
    second.release()
    assert table.stats()["read_ahead_bytes_held"] == 0
    too_big = table.read_ahead(torch.randperm(ROWS)[:3500])  # over budget: pages only
    assert too_big.wait(timeout=30) and too_big.rows is None
    table.close()


def test_live_handles_are_bounded_in_number_the_oldest_released(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table("ssd", weight, scale, path=tmp_path / "t")  # budget: 1 GiB
    batches = [torch.randint(0, ROWS, (int(torch.randint(4, 40, ()).item()),)) for _ in range(MAX_LIVE_HANDLES + 9)]  # fmt: skip
    handles = [table.read_ahead(ids) for ids in batches]
    assert all(h.wait(timeout=30) for h in handles)
    assert all(h.released and h.rows is None for h in handles[:9])
    assert not any(h.released for h in handles[9:])
    held = sum(torch.unique(ids).numel() for ids in batches[9:]) * LAYOUT.row_bytes
    assert table.stats()["read_ahead_bytes_held"] == held
    # a released handle's rows are read again, the same rows
    assert torch.equal(table.lookup(batches[0]), dram.lookup(batches[0]))
    table.close()


def test_a_lookup_waits_for_a_prefetch_still_reading(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table("ssd", weight, scale, path=tmp_path / "t", hot_cache_bytes=1 << 20)
    table.inner.drop_page_cache()  # the ssd table behind the hot cache
    ids = torch.randint(0, ROWS, (8, 48))
    handle = table.read_ahead(ids)  # through the hot cache wrapper, to the ssd table
    # NOTE: a lookup skips a handle the reader thread has not started yet (it reads
    # itself rather than queue behind it) and waits for one being read: wait for the
    # start only, so the lookup below meets a handle still reading (on a busy machine
    # the thread may not have started by the time the lookup runs).
    assert handle._deduped.wait(timeout=30)
    assert torch.equal(table.lookup(ids), dram.lookup(ids))  # no wait() for the rows
    assert table.stats()["read_ahead_hits"] == torch.unique(ids).numel()
    table.close()


def _lookup_in_thread(table, ids: torch.Tensor) -> tuple[threading.Thread, list[torch.Tensor]]:
    got: list[torch.Tensor] = []
    thread = threading.Thread(target=lambda: got.append(table.lookup(ids)), daemon=True)
    thread.start()
    return thread, got


def test_rows_in_the_ram_cache_never_wait_for_a_handle_still_reading(
    tmp_path: Path, gated: type[GatedReader]
) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table(
        "ssd", weight, scale, path=tmp_path / "t", read=gated.name, ram_cache_bytes=16 << 20
    )
    order = torch.randperm(ROWS)
    cached, unread = order[:300], order[300:500]
    assert torch.equal(table.lookup(cached), dram.lookup(cached))  # into the RAM cache
    handle = table.read_ahead(torch.cat([cached, unread]))
    assert gated.entered.wait(timeout=30)  # the handle is reading `unread`, held at the gate

    # rows the RAM cache holds (the handle holds them too): served without waiting
    some = cached[torch.randperm(300)[:120]]
    thread, got = _lookup_in_thread(table, some)
    thread.join(timeout=20)
    assert not thread.is_alive(), "a lookup of cached rows waited for a handle still reading"
    assert torch.equal(got[0], dram.lookup(some)) and table.stats()["read_ahead_hits"] == 0

    # rows only the handle will hold: the lookup waits for it, then takes its rows
    thread, got = _lookup_in_thread(table, unread[:80])
    time.sleep(0.5)
    assert thread.is_alive() and not handle.done()
    gated.gate.set()
    thread.join(timeout=30)
    assert torch.equal(got[0], dram.lookup(unread[:80]))
    assert table.stats()["read_ahead_hits"] == 80
    table.close()


def test_a_handle_released_while_it_reads_keeps_no_rows(
    tmp_path: Path, gated: type[GatedReader]
) -> None:
    weight, scale = random_table(ROWS, DIM)
    table = create_table("ssd", weight, scale, path=tmp_path / "t", read=gated.name)
    handle = table.read_ahead(torch.randperm(ROWS)[:500])
    assert gated.entered.wait(timeout=30)  # the read-ahead thread is reading its rows
    handle.release()
    gated.gate.set()
    assert handle.wait(timeout=30)
    assert handle.rows is None and table.stats()["read_ahead_bytes_held"] == 0
    table.close()


def _decode_step_reads_ahead(table, gated: type[GatedReader]) -> None:
    """An urgent handle read (gate open), as each decode step's is: from now on for
    ``URGENT_WINDOW_S`` the read-ahead thread reads long handles in slices."""
    gated.gate.set()
    assert table.read_ahead(torch.randperm(ROWS)[: random.randint(5, 60)], urgent=True).wait(30)
    gated.gate.clear()
    gated.entered.clear()
    gated.ahead_reads.clear()


def test_a_handle_is_read_in_slices_while_decode_steps_read_ahead_and_stops_once_released(
    tmp_path: Path, gated: type[GatedReader]
) -> None:
    """With decode steps reading ahead, their reads and a lookup's own queue at the disk
    behind one slice of a prompt's reads, not all of them; a handle released meanwhile
    reads no further slice. With none, a handle is read whole (the deepest queue)."""
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table("ssd", weight, scale, path=tmp_path / "t", read=gated.name)
    n = 2 * AHEAD_READ_ROWS + random.randint(1, AHEAD_READ_ROWS - 1)
    order = torch.randperm(ROWS)
    alone, ids, released = order[:n], order[n : 2 * n], order[2 * n : 2 * n + 3 * AHEAD_READ_ROWS]
    gated.gate.set()
    assert table.read_ahead(alone).wait(timeout=30)
    assert gated.ahead_reads == [n]  # no decode step reads ahead: one read of all

    _decode_step_reads_ahead(table, gated)
    handle = table.read_ahead(ids)
    assert gated.entered.wait(timeout=30)
    assert gated.ahead_reads == [AHEAD_READ_ROWS]  # the first slice, held at the gate
    gated.gate.set()
    assert handle.wait(timeout=30)
    assert gated.ahead_reads == [AHEAD_READ_ROWS, AHEAD_READ_ROWS, n - 2 * AHEAD_READ_ROWS]
    for rows in (alone, ids):
        assert torch.equal(table.lookup(rows), dram.lookup(rows))
    assert table.stats()["read_ahead_hits"] == 2 * n

    _decode_step_reads_ahead(table, gated)
    handle = table.read_ahead(released)
    assert gated.entered.wait(timeout=30)
    handle.release()
    gated.gate.set()
    assert handle.wait(timeout=30) and handle.rows is None
    assert gated.ahead_reads == [AHEAD_READ_ROWS]
    table.close()


def test_urgent_handles_are_read_before_queued_ones_and_between_slices(
    tmp_path: Path, gated: type[GatedReader]
) -> None:
    """A decode step's handle (urgent) waits for one slice of a prompt's reads, not for
    the prompt, nor for the prompts queued behind it."""
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table("ssd", weight, scale, path=tmp_path / "t", read=gated.name)
    tail, queued_n, urgent_n = (
        random.randint(210, 500),
        random.randint(110, 190),
        random.randint(10, 90),
    )
    order = torch.randperm(ROWS)
    prompt = order[: 2 * AHEAD_READ_ROWS + tail]
    queued = order[len(prompt) : len(prompt) + queued_n]
    urgent = order[-urgent_n:]
    _decode_step_reads_ahead(table, gated)
    first = table.read_ahead(prompt)
    assert gated.entered.wait(timeout=30)  # its first slice is held at the gate
    behind = table.read_ahead(queued)
    step = table.read_ahead(urgent, urgent=True)
    gated.gate.set()
    assert all(h.wait(timeout=30) for h in (first, behind, step))
    assert gated.ahead_reads == [AHEAD_READ_ROWS, urgent_n, AHEAD_READ_ROWS, tail, queued_n]
    for ids in (prompt, queued, urgent):
        assert torch.equal(table.lookup(ids), dram.lookup(ids))
    assert table.stats()["read_ahead_hits"] == len(prompt) + queued_n + urgent_n
    table.close()


def test_pages_in_the_page_cache_cost_no_reads_and_dropped_ones_are_read(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table("ssd", weight, scale, path=tmp_path / "t")  # just written: cached
    table.refresh_residency()
    ids = torch.randint(0, ROWS, (2000,))
    assert torch.equal(table.lookup(ids), dram.lookup(ids))
    assert table.stats()["pages_requested"] == 0

    table.drop_page_cache()
    assert torch.equal(table.lookup(ids), dram.lookup(ids))
    brought_in = table.stats()["pages_requested"]
    assert brought_in >= np.unique(first_pages(LAYOUT, ids.numpy())).size

    # Someone else reads the whole file into the page cache: the background sweep
    # notices, and the next lookup of new rows needs no reads of its own.
    table.drop_page_cache()
    with open(tmp_path / "t" / "rows.bin", "rb") as f:
        while f.read(1 << 20):
            pass
    # Fresh ids each try: a lookup that needs no reads proves the sweep re-learned
    # (our own reads could have marked only a small share of the file by then).
    for _ in range(20):
        time.sleep(0.1)
        others = torch.randint(0, ROWS, (200,))
        before = table.stats()["pages_requested"]
        assert torch.equal(table.lookup(others), dram.lookup(others))
        if table.stats()["pages_requested"] == before:
            break
    else:
        pytest.fail("the background sweep never noticed the pages back in the page cache")
    table.close()
