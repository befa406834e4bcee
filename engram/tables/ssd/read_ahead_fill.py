"""How an ssd table's read-ahead thread fills one handle (:mod:`engram.rows.read_ahead`).

The handle's ids are deduplicated (its filter built), then its rows come from the RAM
cache where it holds them and from the file for the rest, into the handle's own host
buffer (pinned on a GPU), or, past the table's read-ahead budget, only into the page
cache. While decode steps read ahead, a prompt's rows are read in slices of
:data:`AHEAD_READ_ROWS`, the decode steps' handles filled between them.
"""

from __future__ import annotations

import numpy as np
import torch

from engram.rows.read_ahead import ReadAhead, ReadAheadHandle
from engram.ssd.readers import ALL_ROWS
from engram.tables.ssd.ram_front import RamFront

# NOTE: while decode steps read ahead (engram.rows.read_ahead.URGENT_WINDOW_S), the
# read-ahead thread reads a handle's rows from the disk this many at a time and fills
# the urgent handles (the next decode step's) between slices, so those and a lookup's
# own reads queue at the disk behind at most one slice, not a whole prompt's
# (4,700 reads of a 256-token prompt took 0.4 s on this VM's disk). 512 reads in flight
# is the depth at which that disk gave the most (11.2 k 4 KiB reads/s; 9.5 k at 64:
# benchmark/disk_probe.py).
AHEAD_READ_ROWS = 512


def fill_handle(
    handle: ReadAheadHandle, front: RamFront, ahead: ReadAhead, device: torch.device
) -> torch.Tensor | None:
    """The rows of ``handle`` (``None``: released, or read into the page cache only)."""
    ids, inverse = np.unique(handle.flat_ids, return_inverse=True)
    handle._set_ids(ids, inverse)
    if handle.released:
        return None
    if not handle.keep_rows:
        front.warm(ids)
        return None
    pinned = device.type == "cuda"
    rows = torch.empty(
        (ids.size, handle.row_bytes), dtype=torch.uint8, device="cpu", pin_memory=pinned
    )
    out = rows.numpy()
    # NOTE: counted apart from the lookups' probes: the rows reach a lookup through the
    # handle (read_ahead_hits) or the cache, and a lookup counts only the latter. Counted
    # with them, an ssd server's /metrics showed more RAM-cache misses than rows requested.
    by = "decode_ahead" if handle.urgent else "prompt_ahead"
    _, at = front.from_cache(ids, out, front.need(ids.size), by=by)
    # NOTE: a copy: the urgent fills between slices reuse this thread's scratch.
    at = np.arange(ids.size) if at is ALL_ROWS else at.copy()
    sliced = not handle.urgent and ahead.urgent_recently()
    step = AHEAD_READ_ROWS if sliced else max(1, at.size)
    for start in range(0, at.size, step):
        if sliced:
            ahead.fill_urgent()
        if handle.released:
            return None  # NOTE: nobody takes its rows: the disk is spared the rest
        front.from_file(ids, out, at[start : start + step], by="ahead")
    return rows
