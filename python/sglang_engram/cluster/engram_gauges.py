"""The plugin's Engram gauges (``sglang:engram_*``) on a worker's /metrics, for ``status``.

Counters and histograms are left out; no gauges at all (no plugin, metrics disabled, a
non-Engram model) is not an error.
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


def fetch_engram_gauges(metrics_url: str) -> list[dict[str, Any]]:
    try:
        resp = requests.get(metrics_url, timeout=3)
        resp.raise_for_status()
        return parse_engram_gauges(resp.text)
    except (requests.RequestException, ValueError):  # ValueError: not the text format
        return []


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
