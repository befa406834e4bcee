"""``report.md``: a comparison report's summary in words and tables, for people: the
groups and their hardware and prices, the frontiers' values at the target
interactivities, ratios and dominance, and the charts; what lies outside a group's
measured range is said, not guessed."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def priced_groups(summary: dict[str, Any]) -> list[str]:
    """Groups with tokens per dollar (a point measured on priced hardware)."""
    return [
        name
        for name, g in summary["groups"].items()
        if any(p["tokens_per_dollar"] is not None for p in g["all_points"])
    ]


def render_markdown(summary: dict[str, Any], plots: dict[str, Path]) -> str:
    c = summary["costs"]
    groups = summary["groups"]
    unpriced = [n for n in groups if n not in priced_groups(summary)]
    gpu_prices = ", ".join(f"{k} {v}" for k, v in c["usd_per_gpu_hour"].items())
    cpu_prices = ", ".join(f"{k} {v}" for k, v in c["usd_per_cpu_hour"].items() if v)
    lines = [
        "# Comparison report",
        "",
        *([f"**{summary['note']}**", ""] if summary.get("note") else []),
        f"Inputs: {', '.join(summary.get('inputs', []))}",
        "",
        f"Hardware: {', '.join(sorted({g['hardware'] for g in groups.values()}))}.",
        "",
        "Interactivity = 1000 / P90 TPOT (tok/s/user); tput/device = total tok/s / every "
        "device of the deployment (a GPU; on a CPU the host, all its cores); tokens/$ = "
        "total tok/s x 3600 / deployment $ per hour.",
        *([f"Costs ($/GPU-hour): {gpu_prices}."] if gpu_prices else []),
        *([f"Costs ($/CPU host-hour, from --costs): {cpu_prices}."] if cpu_prices else []),
        *(
            [
                f"Host DRAM ${c['usd_per_dram_gib_hour']}/GiB-hour. Source: {c['source']} "
                f"({c['date']})."
            ]
            if gpu_prices or cpu_prices
            else []
        ),
        *(
            [
                "",
                f"No price for {', '.join(unpriced)}: tokens per dollar left out (a CPU "
                "is priced only by `usd_per_cpu_hour` in a --costs file).",
            ]
            if unpriced
            else []
        ),
        "",
        "## Groups",
        "",
        "| group | hardware | placement | points | failed | best tput/device | best tokens/$ (M) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, g in groups.items():
        pts = g["all_points"]
        best_t = max((p["tput_per_device"] for p in pts), default=None)
        best_d = max((p["tokens_per_dollar"] or 0.0 for p in pts), default=None) or None
        lines.append(
            f"| {name} | {g['hardware']} | {g['placement']} | {g['points']} | {g['failed']} "
            f"| {_num(best_t)} | {_num(best_d, 1e-6)} |"
        )
    for x in summary["at"]:
        key = f"{x:g}"
        lines += [
            "",
            f"## At {key} tok/s/user (on the frontier, PCHIP; - outside the measured range)",
            "",
            "| group | tput/device | tokens/$ (M) |",
            "|---|---|---|",
        ]
        for name, g in groups.items():
            v = g["at"][key]
            lines.append(
                f"| {name} | {_num(v['tput_per_device'])} | {_num(v['tokens_per_dollar'], 1e-6)} |"
            )
        if gap := outside_notes(summary, x):
            lines += ["", gap]
        rs = [
            r
            for r in summary["ratios"]
            if r["at"] == x and (r["tput_per_device"] or r["tokens_per_dollar"])
        ]
        if rs:
            lines += ["", "| A / B | tput/device | tokens/$ |", "|---|---|---|"]
            lines += [
                f"| {r['a']} / {r['b']} | {_num(r['tput_per_device'], 1, 2)} "
                f"| {_num(r['tokens_per_dollar'], 1, 2)} |"
                for r in rs
            ]
    lines += [
        "",
        "## Dominance (share of A's points for which some point of B has both higher "
        "interactivity and more tokens per dollar; between unpriced groups on the same "
        "hardware, more throughput per device)",
        "",
        "| A | B | dominated share | by |",
        "|---|---|---|---|",
        *(f"| {d['a']} | {d['b']} | {_num(d['dominated_share'], 1, 2)} | {d['axis'] or '-'} |"
          for d in summary["dominance"]),
        "",
        "## Frontiers",
    ]  # fmt: skip
    for name, g in groups.items():
        lines += [
            "",
            f"### {name}",
            "",
            "| concurrency | interactivity | tput/device | tokens/$ (M) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {p['max_concurrency']} | {p['interactivity']:.1f} | {_num(p['tput_per_device'])} "
            f"| {_num(p['tokens_per_dollar'], 1e-6)} |"
            for p in g["frontier"]
        ]
    if "tokens_per_dollar" not in plots:
        lines += ["", "No tokens-per-dollar chart: no group has a price."]
    lines += ["", *(f"![{axis}]({path.name})" for axis, path in plots.items()), ""]
    return "\n".join(lines)


def outside_notes(summary: dict[str, Any], x: float) -> str | None:
    """Which groups have no value at interactivity ``x`` (their frontiers do not reach
    it), so that the ratios with them are missing; None when every group has one."""
    key = f"{x:g}"
    out = []
    for name, g in summary["groups"].items():
        if g["at"][key]["tput_per_device"] is not None:
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


def _num(v: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if v is None else f"{v * scale:,.{digits}f}"
