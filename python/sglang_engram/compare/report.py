"""``report``: merge results files, group by ``sku/config``, frontiers, values at
target interactivities, ratios and dominance; writes ``report.md``, ``summary.json``
and the PNG charts.

Throughput is per device: per GPU, or on a CPU point per host (the machine the CPU
server ran on, all its cores). Tokens per dollar needs the device's price: a GPU SKU
without one is an error, a CPU without one (none is shipped) has no tokens per dollar,
and the tokens-per-dollar chart is left out when no group has one.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from engram.files import atomic_write
from sglang_engram.compare.costs import Costs
from sglang_engram.compare.frontier import Point, dominated_share, frontier, value_at
from sglang_engram.compare.plots import plot
from sglang_engram.compare.report_markdown import priced_groups, render_markdown
from sglang_engram.compare.results import ResultsError, check_measured, numbered_results

# NOTE: dominance is judged per dollar, so groups on different SKUs compare fairly.
DOMINANCE_AXIS = "tokens_per_dollar"


def num_devices(row: dict[str, Any]) -> int:
    """What a point's throughput is divided by (rows older than ``num_devices`` ran on
    GPUs and counted them in ``num_gpus``)."""
    n = row.get("num_devices", row.get("num_gpus"))
    if not n:
        raise ValueError(f"point {row['config']} C={row['max_concurrency']} names no devices")
    return int(n)


def point_of(row: dict[str, Any], costs: Costs) -> Point:
    devices = num_devices(row)
    dram = (row.get("engram") or {}).get("table_bytes", {}).get("dram", 0.0)
    hourly = costs.deployment_hour(row.get("device", "gpu"), row["sku"], devices, dram)
    return Point(
        interactivity=1000.0 / row["p90_tpot_ms"],
        tput_per_device=row["total_throughput"] / devices,
        tokens_per_dollar=None if hourly is None else row["total_throughput"] * 3600.0 / hourly,
        max_concurrency=int(row["max_concurrency"]),
    )


def hardware_label(g: dict[str, Any]) -> str:
    """The group's hardware in words: "CPU AMD EPYC, 2 cores" or "4 x H200"."""
    if g["device"] == "cpu":
        hosts = f"{g['num_devices']} hosts" if (g["num_devices"] or 1) > 1 else None
        cores = f"{g['cpu_cores']} cores" if g.get("cpu_cores") else None
        return ", ".join([f"CPU {g['sku']}", *filter(None, [hosts, cores])])
    return f"{g['num_gpus']} x {g['sku']}"


def build_summary(rows: list[dict[str, Any]], costs: Costs, at: list[float]) -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = f"{row['sku']}/{row['config']}"
        g = groups.setdefault(
            name,
            {
                "sku": row["sku"],
                "vendor": row.get("vendor"),
                "device": row.get("device", "gpu"),
                "config": row["config"],
                "placement": row.get("placement"),
                "num_gpus": row.get("num_gpus"),
                "num_devices": row.get("num_devices", row.get("num_gpus")),
                "cpu_cores": row.get("cpu_cores"),
                "failed": 0,
                "_points": [],
            },
        )
        if row.get("status", "ok") != "ok" or not row.get("p90_tpot_ms"):
            g["failed"] += 1
        else:
            g["_points"].append(point_of(row, costs))
    for g in groups.values():
        g["hardware"] = hardware_label(g)
        points = sorted(g.pop("_points"), key=lambda p: p.max_concurrency)
        front = frontier(points)
        g["points"] = len(points)
        g["all_points"] = [p.as_dict() for p in points]
        g["frontier"] = [p.as_dict() for p in front]
        xs = [p.interactivity for p in front]
        g["interactivity_range"] = [min(xs), max(xs)] if xs else None
        g["at"] = {
            f"{x:g}": {
                "tput_per_device": value_at(front, x, "tput_per_device"),
                "tokens_per_dollar": value_at(front, x, "tokens_per_dollar"),
            }
            for x in at
        }
        g["_pts"] = points
    names = sorted(groups)
    ratios = []
    for x, (a, b) in itertools.product(at, itertools.permutations(names, 2)):
        va, vb = groups[a]["at"][f"{x:g}"], groups[b]["at"][f"{x:g}"]
        ratios.append(
            {
                "at": x,
                "a": a,
                "b": b,
                **{k: _ratio(va[k], vb[k]) for k in ("tput_per_device", "tokens_per_dollar")},
            }
        )
    dominance = []
    for a, b in itertools.permutations(names, 2):
        axis = _dominance_axis(groups[a], groups[b])
        share = dominated_share(groups[a]["_pts"], groups[b]["_pts"], axis) if axis else None
        dominance.append({"a": a, "b": b, "dominated_share": share, "axis": axis})
    for g in groups.values():
        del g["_pts"]
    return {
        "at": at,
        "groups": {n: groups[n] for n in names},
        "ratios": ratios,
        "dominance": dominance,
        "costs": {
            "usd_per_gpu_hour": {s: costs.usd_per_gpu_hour.get(s) for s in _skus(groups, "gpu")},
            "usd_per_cpu_hour": {s: costs.usd_per_cpu_hour.get(s) for s in _skus(groups, "cpu")},
            "usd_per_dram_gib_hour": costs.usd_per_dram_gib_hour,
            "source": costs.source,
            "date": costs.date,
            "files": list(costs.files),
        },
    }


def write_report(
    results: list[str | Path], out: Path, costs: Costs, at: list[float], note: str | None = None
) -> dict[str, Any]:
    rows = []
    for path in results:
        for line, row in numbered_results(path):
            if row.get("status", "ok") == "ok":
                check_measured(row, f"{path}:{line}")
                # NOTE: an unknown GPU SKU fails before anything is written
                costs.device_hour(row.get("device", "gpu"), row["sku"])
            rows.append(row)
    if not rows:
        raise ResultsError(f"no points in {', '.join(map(str, results))}")
    summary = build_summary(rows, costs, at)
    summary["inputs"] = [str(p) for p in results]
    summary["note"] = note
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    plots = {"tput_per_device": plot(summary, "tput_per_device", out / "tput_per_device.png")}
    (out / "tokens_per_dollar.png").unlink(missing_ok=True)  # NOTE: never a stale chart
    if priced_groups(summary):
        plots["tokens_per_dollar"] = plot(
            summary, "tokens_per_dollar", out / "tokens_per_dollar.png"
        )
    atomic_write(out / "report.md", render_markdown(summary, plots))
    return summary


def _dominance_axis(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Per dollar where both groups are priced; per device between unpriced groups on
    the same hardware (one price would scale both alike); else none."""
    pts = [*a["_pts"], *b["_pts"]]
    if all(p.tokens_per_dollar is not None for p in pts):
        return DOMINANCE_AXIS
    if a["hardware"] == b["hardware"]:
        return "tput_per_device"
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _skus(groups: dict[str, dict[str, Any]], device: str) -> list[str]:
    return sorted({g["sku"] for g in groups.values() if g["device"] == device})
