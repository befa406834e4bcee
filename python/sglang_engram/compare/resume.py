"""``sweep --resume`` continues only the sweep that ``DIR/spec.json`` records.

The points in ``results.jsonl`` were measured with the recorded spec. A resume is refused
(one line naming what changed) when the model, workload, request counts, seed or any
recorded config differ, or a config or concurrency was dropped; configs and concurrencies
added since then are new points and run. ``--force-new`` moves the old run aside and
starts over, so no measured point is ever deleted.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from sglang_engram.compare.results import RESULTS
from sglang_engram.compare.spec import SweepSpec, SweepSpecError, parse_sweep_spec

SPEC = "spec.json"
# NOTE: timeouts decide whether a point finishes, not what it measures.
_IGNORED = {"point_timeout_s", "startup_timeout_s"}
_SHOWN = 4


class ResumeRefused(ValueError):
    """The run directory holds points of another sweep."""


def spec_record(spec: SweepSpec) -> str:
    """What ``DIR/spec.json`` holds."""
    return spec.model_dump_json(indent=2, by_alias=True)


def check_resume(out: Path, spec: SweepSpec, rows: list[dict[str, Any]]) -> None:
    """Raise :class:`ResumeRefused` unless ``spec`` continues the sweep whose points
    ``rows`` are: the one ``out/spec.json`` records (the rows' own model and workload
    where a run has no spec.json)."""
    recorded = _recorded(out)
    if recorded is not None:
        changes = spec_changes(_normal(recorded), _normal(spec))
    else:
        changes = sorted(
            {
                change
                for row in rows
                for key, now in (("model", spec.model), ("workload", spec.workload.describe()))
                for change in _diff(key, row.get(key, now), now)
            }
        )
    if changes:
        shown = ", ".join(changes[:_SHOWN])
        more = f" (and {len(changes) - _SHOWN} more)" if len(changes) > _SHOWN else ""
        raise ResumeRefused(
            f"{out} holds points of another sweep than this spec: {shown}{more}; "
            "its points were measured with the recorded spec, so resume with that spec, "
            "or pass --force-new to start over (the old run is moved aside)"
        )


def start_over(out: Path) -> Path | None:
    """Move the previous run's files (results, raw outputs, spec) into ``out/previous-<UTC
    time>/``; returns that folder, or None when there was nothing to move."""
    names = [n for n in (RESULTS, "raw", SPEC) if (out / n).exists()]
    if not names:
        return None
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = out / f"previous-{stamp}"
    aside.mkdir()
    for name in names:
        (out / name).rename(aside / name)
    return aside


def spec_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between the recorded and the new spec, as ``key old -> new`` items;
    added configs and concurrencies are not changes."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        if key in _IGNORED:
            continue
        if key == "configs":
            out += _config_changes(old.get(key, []), new.get(key, []))
        elif key == "concurrency":
            if dropped := sorted(set(old.get(key, [])) - set(new.get(key, []))):
                out.append(f"concurrency {', '.join(map(str, dropped))} dropped")
        else:
            out += _diff(key, old.get(key), new.get(key))
    return out


def _config_changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    mine = {c["name"]: c for c in new}
    out = []
    for config in old:
        where = f"configs[{config['name']}]"
        if config["name"] not in mine:
            out.append(f"{where} dropped")
        else:
            out += _diff(where, config, mine[config["name"]])
    return out


def _diff(where: str, old: Any, new: Any) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            change
            for key in sorted(set(old) | set(new))
            if key not in _IGNORED
            for change in _diff(f"{where}.{key}", old.get(key), new.get(key))
        ]
    return [] if old == new else [f"{where} {json.dumps(old)} -> {json.dumps(new)}"]


def _recorded(out: Path) -> SweepSpec | None:
    path = out / SPEC
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise SweepSpecError("not a JSON object")
        return parse_sweep_spec(data, source=str(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, SweepSpecError) as exc:
        raise ResumeRefused(
            f"{path} cannot be read as the recorded sweep spec ({exc}); pass --force-new to "
            "start over (the old run is moved aside)"
        ) from None


def _normal(spec: SweepSpec) -> dict[str, Any]:
    return json.loads(spec_record(spec))
