"""``results.jsonl``: one JSON object per point, appended as each point ends.

A point is keyed by ``(config, max_concurrency)``. Each line is written with one
``write`` and fsynced, so a sweep killed mid-write leaves at most one torn last line,
which reading skips and ``--resume`` cuts (that point then runs again).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"
# What every line holds, and the numbers a measured ("ok") point holds; each number is
# finite and at least its minimum (a latency or throughput below 0 is no measurement).
KEYS = ("config", "sku", "max_concurrency")
MEASURED = {"num_devices": 1, "total_throughput": 0.0, "p90_tpot_ms": 0.0}
_FIX = "fix or delete that line"


class ResultsError(ValueError):
    """A results file that cannot be used; the message names the file and the line."""


def point_key(row: dict[str, Any]) -> tuple[str, int]:
    return row["config"], int(row["max_concurrency"])


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Every complete line of a results file (a torn last line is skipped)."""
    return [row for _, row in numbered_results(path)]


def numbered_results(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, point)`` for every complete line, each with the keys a point has."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(
            f"{path} is not a results file (byte {exc.start} is not UTF-8 text); give the "
            "results.jsonl that compare sweep wrote"
        ) from None
    rows = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1 and not text.endswith("\n"):
                continue  # NOTE: torn by a kill mid-write; that point runs again
            raise ResultsError(f"{path}:{i + 1}: not a JSON line; {_FIX}") from None
        where = f"{path}:{i + 1}"
        if not isinstance(row, dict):
            raise ResultsError(f"{where}: a point is a JSON object, not {type(row).__name__}")
        if missing := [k for k in KEYS if k not in row]:
            raise ResultsError(
                f"{where}: the point has no {', '.join(map(repr, missing))} (every line of a "
                f"results file has {', '.join(KEYS)}); {_FIX}"
            )
        rows.append((i + 1, row))
    return rows


def check_measured(row: dict[str, Any], where: str) -> None:
    """Refuse a measured point whose numbers no measurement gives (negative, NaN, inf)."""
    for key, least in MEASURED.items():
        if key == "num_devices" and key not in row:
            key = "num_gpus"  # NOTE: rows older than num_devices ran on GPUs only
        value = row.get(key)
        if value is None and key == "p90_tpot_ms":
            continue  # NOTE: no TPOT at all: the point counts as failed
        if key not in row:
            raise ResultsError(f"{where}: the measured point has no {key!r}; {_FIX}")
        number = isinstance(value, int | float) and not isinstance(value, bool)
        whole = isinstance(least, float) or (number and float(value).is_integer())
        if not (number and math.isfinite(value) and value >= least and whole):
            kind = "a whole number" if isinstance(least, int) else "a finite number"
            raise ResultsError(
                f"{where}: {key} is {value!r}, which no measurement gives (it is {kind} "
                f">= {least:g}); {_FIX}"
            )


def append_result(path: str | Path, row: dict[str, Any]) -> None:
    data = (json.dumps(row, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_torn_tail(path: str | Path) -> bool:
    """Cut a last line that a kill left without its newline; True if one was cut."""
    path = Path(path)
    if not path.exists():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    with open(path, "r+b") as f:
        f.truncate(data.rfind(b"\n") + 1)
    return True
