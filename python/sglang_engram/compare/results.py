"""``results.jsonl``: one JSON object per point, appended as each point ends.

A point is keyed by ``(config, max_concurrency)``. Each line is written with one
``write`` and fsynced, so a sweep killed mid-write leaves at most one torn last line,
which reading skips and ``--resume`` cuts (that point then runs again).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"


def point_key(row: dict[str, Any]) -> tuple[str, int]:
    return row["config"], int(row["max_concurrency"])


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Every complete line of a results file (a torn last line is skipped)."""
    path = Path(path)
    rows = []
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                continue  # NOTE: torn by a kill mid-write; that point runs again
            raise ValueError(f"{path}:{i + 1}: not a JSON line") from None
    return rows


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
