"""An ssd table's own counters, as ``stats()`` gives them to ``/metrics`` (always these
keys, every value a float):

- ``ram_cache_hit_ratio`` (hits / lookups of distinct rows in the RAM row cache; 0
  without one), ``ram_cache_hits`` and ``ram_cache_misses`` (each distinct row of a
  lookup not taken from a read-ahead handle done reading, once: their sum is at most
  ``unique_rows``), ``ram_cache_bytes``;
- the read-ahead's own probes of the RAM cache, not counted above:
  ``ram_cache_prompt_ahead_hits`` / ``_misses`` (each distinct row of a prompt's
  read-ahead at admission, once, as the fill looks for it in the RAM cache before
  reading the disk) and ``ram_cache_decode_ahead_hits`` / ``_misses`` (the same for a
  decode step's read-ahead); a row a lookup wants from a handle still reading is
  counted by both;
- ``read_ahead_hits`` (rows taken from read-ahead handles), ``read_ahead_bytes_held``;
- ``pages_requested`` (pages asked of the data file), ``io_errors`` (lookups failed by
  an I/O error);
- ``lookup_rows_read`` / ``ahead_rows_read`` (rows read from the data file by lookups /
  by the read-ahead thread: the page cache may serve some), ``lookup_read_seconds`` /
  ``ahead_read_seconds`` (their disk read time), ``handle_wait_seconds`` (lookups
  waiting on read-ahead handles);
- ``seeded_rows`` (rows a seed put into the RAM cache) and ``seed_seconds`` (how long
  seeding ran, so far).
"""

from __future__ import annotations

from engram.rows.read_ahead import ReadAhead
from engram.tables.ssd.host_lookup import HostLookup
from engram.tables.ssd.ram_front import RamFront
from engram.tables.ssd.seeding import Seeder


def ssd_stats(
    front: RamFront, ahead: ReadAhead, host: HostLookup, seeder: Seeder | None
) -> dict[str, float]:
    """The counters above, of a table's RAM front, read-ahead, lookups and seeding."""
    out = {
        "ram_cache_hit_ratio": 0.0,
        "ram_cache_hits": 0,
        "ram_cache_misses": 0,
        "ram_cache_bytes": 0,
        "ram_cache_prompt_ahead_hits": 0,
        "ram_cache_prompt_ahead_misses": 0,
        "ram_cache_decode_ahead_hits": 0,
        "ram_cache_decode_ahead_misses": 0,
        "read_ahead_hits": ahead.hits,
        "read_ahead_bytes_held": ahead.held_bytes(),
        "pages_requested": front.file.reader.pages_requested,
        "io_errors": host.io_errors,
        "lookup_rows_read": front.rows_read["lookup"],
        "ahead_rows_read": front.rows_read["ahead"],
        "lookup_read_seconds": front.read_seconds["lookup"],
        "ahead_read_seconds": front.read_seconds["ahead"],
        "handle_wait_seconds": host.handle_wait_seconds,
        "seeded_rows": seeder.rows if seeder else 0,
        "seed_seconds": seeder.seconds if seeder else 0.0,
    }
    if front.cache is not None:
        out.update(front.cache.stats())
    return {key: float(value) for key, value in out.items()}
