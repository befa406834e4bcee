"""Engram counters summed over a deployment's servers (each server's ``/metrics``),
before and after a point, and what the point did in between.

A deployment may have several servers (prefill and decode workers): their samples are
summed. The counters come from ``sglang_engram.metrics`` (``sglang:engram_*``); a server
without them (Engram off, or metrics not enabled) contributes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engram.placements import having
from sglang_engram.metrics.names import (
    BYTES_READ,
    HOT_CACHE_HIT_RATIO,
    HOT_TIER,
    ROWS_REQUESTED,
    TABLE_BYTES,
    UNIQUE_ROWS,
    total,
)
from sglang_engram.metrics.scrape import ScrapeError, scrape_engram

ROWS, UNIQUE, BYTES = total(ROWS_REQUESTED), total(UNIQUE_ROWS), total(BYTES_READ)


def summed_counters(urls: Iterable[str], timeout_s: float = 10.0) -> dict[str, Any]:
    """Summed Engram samples: ``{"rows_requested", "unique_rows", "bytes_read": {tier},
    "table_bytes": {tier}, "hot_cache_hit_ratio", "errors": [...]}``."""
    out: dict[str, Any] = {
        "rows_requested": 0.0,
        "unique_rows": 0.0,
        "bytes_read": {},
        "table_bytes": {},
        "hot_cache_hit_ratio": None,
        "errors": [],
    }
    for url in urls:
        try:
            samples = scrape_engram(url.rstrip("/") + "/metrics", timeout_s)
        except ScrapeError as exc:
            out["errors"].append(str(exc))
            continue
        for sample in samples:
            _fold(out, sample.name, sample.labels, sample.value)
    return out


def _fold(out: dict[str, Any], name: str, labels: dict[str, str], value: float) -> None:
    if name == ROWS:
        out["rows_requested"] += value
    elif name == UNIQUE:
        out["unique_rows"] += value
    elif name in (BYTES, TABLE_BYTES):
        key = "bytes_read" if name == BYTES else "table_bytes"
        tier = labels.get("tier", "?")
        out[key][tier] = out[key].get(tier, 0.0) + value
    elif name == HOT_CACHE_HIT_RATIO:
        out["hot_cache_hit_ratio"] = max(value, out["hot_cache_hit_ratio"] or 0.0)


def point_counters(
    before: dict[str, Any], after: dict[str, Any], output_tokens: float, placement: str
) -> dict[str, Any]:
    """What one point did: rows per output token, unique-row ratio, bytes per tier and
    the hot-cache hit ratio over the point (``None`` where there is nothing to divide).

    NOTE: the scrapes bracket the whole benchmark run, so its warm-up requests count
    too (2 x C short requests next to 10 x C measured ones by default)."""
    rows = after["rows_requested"] - before["rows_requested"]
    unique = after["unique_rows"] - before["unique_rows"]
    tiers = set(before["bytes_read"]) | set(after["bytes_read"])
    read = {t: after["bytes_read"].get(t, 0.0) - before["bytes_read"].get(t, 0.0) for t in tiers}
    total = sum(read.values())
    hot = None
    # NOTE: with hbm tables every byte is "hbm" without any cache in front: no ratio.
    if any(p in placement for p in having("hot_cache")) and total > 0:
        hot = read.get(HOT_TIER, 0.0) / total
    return {
        "rows_per_output_token": rows / output_tokens if output_tokens else None,
        "unique_row_ratio": unique / rows if rows else None,
        "bytes_read": read,
        "hot_cache_hit_ratio": hot,
        "table_bytes": after["table_bytes"],
        "before": before,
        "after": after,
    }
