"""``report``: merge results files, group by ``sku/config``, frontiers, values at
target interactivities, ratios and dominance; writes ``report.md``, ``summary.json``
and the two PNG charts."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from engram.files import atomic_write
from sglang_engram.compare.costs import Costs
from sglang_engram.compare.frontier import Point, dominated_share, frontier, value_at
from sglang_engram.compare.plots import plot
from sglang_engram.compare.results import ResultsError, check_measured, numbered_results

# NOTE: dominance is judged per dollar, so groups on different SKUs compare fairly.
DOMINANCE_AXIS = "tokens_per_dollar"


def point_of(row: dict[str, Any], costs: Costs) -> Point:
    tput_per_gpu = row["total_throughput"] / row["num_gpus"]
    dram = (row.get("engram") or {}).get("table_bytes", {}).get("dram", 0.0)
    hourly = costs.deployment_hour(row["sku"], row["num_gpus"], dram)
    return Point(
        interactivity=1000.0 / row["p90_tpot_ms"],
        tput_per_gpu=tput_per_gpu,
        tokens_per_dollar=row["total_throughput"] * 3600.0 / hourly,
        max_concurrency=int(row["max_concurrency"]),
    )


def build_summary(rows: list[dict[str, Any]], costs: Costs, at: list[float]) -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = f"{row['sku']}/{row['config']}"
        g = groups.setdefault(
            name,
            {
                "sku": row["sku"],
                "vendor": row.get("vendor"),
                "config": row["config"],
                "placement": row.get("placement"),
                "num_gpus": row.get("num_gpus"),
                "failed": 0,
                "_points": [],
            },
        )
        if row.get("status", "ok") != "ok" or not row.get("p90_tpot_ms"):
            g["failed"] += 1
        else:
            g["_points"].append(point_of(row, costs))
    for g in groups.values():
        points = sorted(g.pop("_points"), key=lambda p: p.max_concurrency)
        front = frontier(points)
        g["points"] = len(points)
        g["all_points"] = [p.as_dict() for p in points]
        g["frontier"] = [p.as_dict() for p in front]
        xs = [p.interactivity for p in front]
        g["interactivity_range"] = [min(xs), max(xs)] if xs else None
        g["at"] = {
            f"{x:g}": {
                "tput_per_gpu": value_at(front, x, "tput_per_gpu"),
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
                **{k: _ratio(va[k], vb[k]) for k in ("tput_per_gpu", "tokens_per_dollar")},
            }
        )
    dominance = [
        {
            "a": a,
            "b": b,
            "dominated_share": dominated_share(
                groups[a]["_pts"], groups[b]["_pts"], DOMINANCE_AXIS
            ),
        }
        for a, b in itertools.permutations(names, 2)
    ]
    for g in groups.values():
        del g["_pts"]
    return {
        "at": at,
        "groups": {n: groups[n] for n in names},
        "ratios": ratios,
        "dominance": dominance,
        "dominance_axes": ["interactivity", DOMINANCE_AXIS],
        "costs": {
            "usd_per_gpu_hour": {s: costs.usd_per_gpu_hour.get(s) for s in _skus(groups)},
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
                costs.gpu_hour(row["sku"])  # NOTE: an unknown SKU fails before anything is written
            rows.append(row)
    if not rows:
        raise ResultsError(f"no points in {', '.join(map(str, results))}")
    summary = build_summary(rows, costs, at)
    summary["inputs"] = [str(p) for p in results]
    summary["note"] = note
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    plots = {
        "tput_per_gpu": plot(summary, "tput_per_gpu", out / "tput_per_gpu.png",
                             "Throughput per GPU vs interactivity"),
        "tokens_per_dollar": plot(summary, "tokens_per_dollar", out / "tokens_per_dollar.png",
                                  "Tokens per dollar vs interactivity"),
    }  # fmt: skip
    atomic_write(out / "report.md", render_markdown(summary, plots))
    return summary


def render_markdown(summary: dict[str, Any], plots: dict[str, Path]) -> str:
    c = summary["costs"]
    lines = [
        "# Comparison report",
        "",
        *([f"**{summary['note']}**", ""] if summary.get("note") else []),
        f"Inputs: {', '.join(summary.get('inputs', []))}",
        "",
        "Interactivity = 1000 / P90 TPOT (tok/s/user); tput/GPU = total tok/s / every GPU "
        "of the deployment; tokens/$ = total tok/s x 3600 / deployment $ per hour.",
        f"Costs ($/GPU-hour): {', '.join(f'{k} {v}' for k, v in c['usd_per_gpu_hour'].items())}"
        f"; host DRAM ${c['usd_per_dram_gib_hour']}/GiB-hour. Source: {c['source']} "
        f"({c['date']}).",
        "",
        "## Groups",
        "",
        "| group | placement | GPUs | points | failed | best tput/GPU | best tokens/$ (M) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, g in summary["groups"].items():
        pts = g["all_points"]
        best_t = max((p["tput_per_gpu"] for p in pts), default=None)
        best_d = max((p["tokens_per_dollar"] for p in pts), default=None)
        lines.append(
            f"| {name} | {g['placement']} | {g['num_gpus']} | {g['points']} | {g['failed']} "
            f"| {_num(best_t)} | {_num(best_d, 1e-6)} |"
        )
    for x in summary["at"]:
        key = f"{x:g}"
        lines += [
            "",
            f"## At {key} tok/s/user (on the frontier, PCHIP; - outside the measured range)",
            "",
            "| group | tput/GPU | tokens/$ (M) |",
            "|---|---|---|",
        ]
        for name, g in summary["groups"].items():
            v = g["at"][key]
            lines.append(
                f"| {name} | {_num(v['tput_per_gpu'])} | {_num(v['tokens_per_dollar'], 1e-6)} |"
            )
        rs = [r for r in summary["ratios"] if r["at"] == x and r["tokens_per_dollar"]]
        if gap := outside_notes(summary, x):
            lines += ["", gap]
        if rs:
            lines += ["", "| A / B | tput/GPU | tokens/$ |", "|---|---|---|"]
            lines += [
                f"| {r['a']} / {r['b']} | {_num(r['tput_per_gpu'], 1, 2)} "
                f"| {_num(r['tokens_per_dollar'], 1, 2)} |"
                for r in rs
            ]
    lines += [
        "",
        "## Dominance (share of A's points for which some point of B has both higher "
        "interactivity and more tokens per dollar)",
        "",
        "| A | B | dominated share |",
        "|---|---|---|",
        *(f"| {d['a']} | {d['b']} | {_num(d['dominated_share'], 1, 2)} |" for d in summary["dominance"]),
        "",
        "## Frontiers",
    ]  # fmt: skip
    for name, g in summary["groups"].items():
        lines += [
            "",
            f"### {name}",
            "",
            "| concurrency | interactivity | tput/GPU | tokens/$ (M) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {p['max_concurrency']} | {p['interactivity']:.1f} | {_num(p['tput_per_gpu'])} "
            f"| {_num(p['tokens_per_dollar'], 1e-6)} |"
            for p in g["frontier"]
        ]
    lines += ["", *(f"![{axis}]({path.name})" for axis, path in plots.items()), ""]
    return "\n".join(lines)


def outside_notes(summary: dict[str, Any], x: float) -> str | None:
    """Which groups have no value at interactivity ``x`` (their frontiers do not reach
    it), so that the ratios with them are missing; None when every group has one."""
    key = f"{x:g}"
    out = []
    for name, g in summary["groups"].items():
        if g["at"][key]["tokens_per_dollar"] is not None:
            continue
        span = g.get("interactivity_range")
        out.append(
            f"{name} (measured {span[0]:.1f}-{span[1]:.1f})" if span else f"{name} (no point)"
        )
    if not out:
        return None
    return (
        f"No value at {key} tok/s/user, so no ratios with: {'; '.join(out)}. Their "
        "interactivity ranges do not reach it: choose --at inside them, or sweep more "
        "concurrencies."
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _skus(groups: dict[str, dict[str, Any]]) -> list[str]:
    return sorted({g["sku"] for g in groups.values()})


def _num(v: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if v is None else f"{v * scale:,.{digits}f}"
