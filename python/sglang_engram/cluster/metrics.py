"""Read the plugin's Engram gauges (``sglang:engram_*``) from a server's /metrics.

Whatever ``sglang:engram_`` gauges are there are returned (table bytes per tier, the hot
cache's hit ratio, ...); counters and histograms are left out. None at all (no plugin,
an older plugin, metrics disabled, a non-Engram model) is not an error.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from typing import Any

PREFIX = "sglang:engram_"
_SAMPLE = re.compile(r"^(?P<name>[^\s{]+)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


_NOT_GAUGE = ("_total", "_created", "_bucket", "_sum", "_count")


def parse_engram_gauges(text: str) -> list[dict[str, Any]]:
    """``[{"name", "labels", "value"}]`` for each ``sglang:engram_*`` gauge sample in ``text``."""
    types: dict[str, str] = {}
    samples = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = (line.split() + ["", ""])[:4]
            types[name] = kind
            continue
        if not line.startswith(PREFIX):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        name = match["name"]
        # NOTE: without a TYPE line, fall back to the exposition format's name suffixes.
        if types.get(name, "untyped" if name.endswith(_NOT_GAUGE) else "gauge") != "gauge":
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        samples.append({"name": name, "labels": labels, "value": value})
    return samples


def fetch_engram_gauges(metrics_url: str, timeout_s: float = 3.0) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(metrics_url, timeout=timeout_s) as resp:
            text = resp.read().decode(errors="replace")
    except (urllib.error.URLError, OSError, ValueError):
        return []
    return parse_engram_gauges(text)


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
