"""The names of the Engram metrics on SGLang's ``/metrics``.

The exporter (:mod:`sglang_engram.metrics.exporter`) registers them; ``cluster status``
and ``compare sweep`` read them back (:mod:`sglang_engram.metrics.scrape`). These are the
names given to ``prometheus_client``; a counter's samples carry ``_total`` on top
(:func:`total`).
"""

from __future__ import annotations

PREFIX = "sglang:engram_"
# NOTE: a dram or ssd table reports the bytes its HBM hot cache served under "hbm".
HOT_TIER = "hbm"

ROWS_REQUESTED = f"{PREFIX}rows_requested"  # counter, per layer
UNIQUE_ROWS = f"{PREFIX}unique_rows"  # counter, per layer
BYTES_READ = f"{PREFIX}bytes_read"  # counter, per tier
LOOKUP_SECONDS = f"{PREFIX}lookup_seconds"  # histogram
TABLE_BYTES = f"{PREFIX}table_bytes"  # gauge, per tier
HOT_CACHE_HIT_RATIO = f"{PREFIX}hot_cache_hit_ratio"  # gauge
SSD_RAM_CACHE_HIT_RATIO = f"{PREFIX}ssd_ram_cache_hit_ratio"  # gauge
# counter (per layer) -> the cumulative key of an ssd table's stats() it follows, its help
SSD_COUNTERS = {
    # NOTE: hits + misses: the distinct rows of lookups looked for in the RAM cache (those
    # not taken from read-ahead done reading), each once; the read-ahead's probes count
    # in neither, so they never pass the rows requested.
    f"{PREFIX}ssd_ram_cache_hits": (
        "ram_cache_hits",
        "Distinct Engram rows of lookups the ssd RAM cache served",
    ),
    f"{PREFIX}ssd_ram_cache_misses": (
        "ram_cache_misses",
        "Distinct Engram rows of lookups the ssd RAM cache missed (read-ahead not counted)",
    ),
    # NOTE: the read-ahead's own probes, apart: a fill looks for each distinct row of its
    # handle in the RAM cache before reading the disk, and lookups then take those rows
    # from the handle (ssd_prefetch_hits) without asking the cache. With read-ahead on,
    # what the cache served is these hits plus the lookups' (a lookup that wants a row of
    # a handle still reading asks for it too: that row is counted twice).
    f"{PREFIX}ssd_ram_cache_prompt_ahead_hits": (
        "ram_cache_prompt_ahead_hits",
        "Distinct Engram rows of prompts' ssd read-ahead (at admission) found in the RAM cache",
    ),
    f"{PREFIX}ssd_ram_cache_prompt_ahead_misses": (
        "ram_cache_prompt_ahead_misses",
        "Distinct Engram rows of prompts' ssd read-ahead (at admission) not in the RAM cache",
    ),
    f"{PREFIX}ssd_ram_cache_decode_ahead_hits": (
        "ram_cache_decode_ahead_hits",
        "Distinct Engram rows of decode steps' ssd read-ahead found in the RAM cache",
    ),
    f"{PREFIX}ssd_ram_cache_decode_ahead_misses": (
        "ram_cache_decode_ahead_misses",
        "Distinct Engram rows of decode steps' ssd read-ahead not in the RAM cache",
    ),
    # NOTE: named before "read-ahead" was the one word for it, as --engram-prefetch is;
    # kept, since dashboards and the sweeps' results files read it by this name.
    f"{PREFIX}ssd_prefetch_hits": ("read_ahead_hits", "Engram rows served from SSD read-ahead"),
    f"{PREFIX}ssd_io_errors": ("io_errors", "Failed reads of Engram ssd table files"),
    f"{PREFIX}ssd_lookup_rows_read": ("lookup_rows_read", "Engram rows lookups read from ssd"),
    f"{PREFIX}ssd_ahead_rows_read": ("ahead_rows_read", "Engram rows read-ahead read from ssd"),
    f"{PREFIX}ssd_lookup_read_seconds": ("lookup_read_seconds", "Seconds lookups read ssd rows"),
    f"{PREFIX}ssd_ahead_read_seconds": ("ahead_read_seconds", "Seconds read-ahead read ssd rows"),
    f"{PREFIX}ssd_handle_wait_seconds": (
        "handle_wait_seconds",
        "Seconds lookups waited on ssd read-ahead",
    ),
    f"{PREFIX}ssd_seeded_rows": (
        "seeded_rows",
        "Engram rows --engram-seed-profile put into the ssd RAM cache",
    ),
    f"{PREFIX}ssd_seed_seconds": ("seed_seconds", "Seconds seeding the ssd RAM cache ran"),
}


def total(counter: str) -> str:
    """The name of a counter's cumulative sample on ``/metrics``."""
    return f"{counter}_total"
