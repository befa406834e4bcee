"""The plugin's Engram gauges (``sglang:engram_*``) on a worker's /metrics, for ``status``.

Whatever ``sglang:engram_`` gauges are there are returned (table bytes per tier, the hot
cache's hit ratio, ...); counters and histograms are left out. None at all (no plugin,
metrics disabled, a non-Engram model) is not an error.
"""

from __future__ import annotations

from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

PREFIX = "sglang:engram_"


def parse_engram_gauges(text: str) -> list[dict[str, Any]]:
    """``[{"name", "labels", "value"}]`` for each ``sglang:engram_*`` gauge sample in ``text``."""
    return [
        {"name": s.name, "labels": dict(s.labels), "value": s.value}
        for family in text_string_to_metric_families(text)
        if family.type == "gauge" and family.name.startswith(PREFIX)
        for s in family.samples
    ]


def fetch_engram_gauges(metrics_url: str, timeout_s: float = 3.0) -> list[dict[str, Any]]:
    try:
        resp = requests.get(metrics_url, timeout=timeout_s)
        resp.raise_for_status()
        return parse_engram_gauges(resp.text)
    except (requests.RequestException, ValueError):  # ValueError: not the text format
        return []


def summarize(samples: list[dict[str, Any]]) -> str:
    """One short line: each sample as name{labels}=value, byte gauges in GiB/MiB."""
    if not samples:
        return "no engram metrics"
    parts = []
    for s in samples:
        name = s["name"][len(PREFIX) :]
        labels = ",".join(f"{k}={v}" for k, v in s["labels"].items())
        value = _bytes(s["value"]) if name.endswith("_bytes") else f"{s['value']:g}"
        parts.append(f"{name}{{{labels}}}={value}" if labels else f"{name}={value}")
    return " ".join(parts)


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:g}B"
