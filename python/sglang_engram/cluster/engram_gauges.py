"""The plugin's Engram gauges (``sglang:engram_*``) on a worker's /metrics, for ``status``.

Counters and histograms are left out; no gauges at all (no plugin, metrics disabled, a
non-Engram model) is not an error, nor is a /metrics that does not answer.
"""

from __future__ import annotations

from typing import Any

from sglang_engram.metrics.names import PREFIX
from sglang_engram.metrics.scrape import Sample, ScrapeError, scrape_engram


def fetch_engram_gauges(metrics_url: str) -> list[dict[str, Any]]:
    try:
        return gauges(scrape_engram(metrics_url, timeout_s=3))
    except ScrapeError:
        return []


def gauges(samples: list[Sample]) -> list[dict[str, Any]]:
    """``[{"name", "labels", "value"}]`` for each gauge of ``samples``."""
    return [
        {"name": s.name, "labels": s.labels, "value": s.value} for s in samples if s.kind == "gauge"
    ]


def summarize(samples: list[dict[str, Any]]) -> str:
    """One short line: each sample as name{labels}=value, byte gauges in GiB/MiB/KiB."""
    parts = []
    for s in samples:
        name, value = s["name"].removeprefix(PREFIX), s["value"]
        labels = ",".join(f"{k}={v}" for k, v in s["labels"].items())
        shown = f"{value:g}"
        if name.endswith("_bytes"):
            unit = next((u for u in ("GiB", "MiB", "KiB") if value >= _UNITS[u]), None)
            shown = f"{value / _UNITS[unit]:.1f}{unit}" if unit else f"{value:g}B"
        parts.append(f"{name}{{{labels}}}={shown}" if labels else f"{name}={shown}")
    return " ".join(parts) or "no engram metrics"


_UNITS = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10}
