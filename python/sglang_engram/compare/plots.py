"""PNG charts of a report: throughput per device and tokens per dollar against
interactivity, one colour per group, frontiers drawn, each point labelled with its
concurrency. Titles, axes and legend say the hardware: GPUs, or a CPU host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglang_engram.compare.frontier import Point, curve

X_LABEL = "Interactivity (tok/s/user = 1000 / P90 TPOT ms)"
DOLLAR_LABEL = "Tokens per dollar (millions of tokens / $)"


def labels(summary: dict[str, Any], axis: str) -> tuple[str, str]:
    """(title, y label) of a chart, naming what its devices are."""
    if axis == "tokens_per_dollar":
        return "Tokens per dollar vs interactivity", DOLLAR_LABEL
    devices = {g["device"] for g in summary["groups"].values()}
    if devices == {"cpu"}:
        return (
            "Throughput per CPU host vs interactivity (CPU serving, no GPU)",
            "Throughput per CPU host (tok/s, all its cores)",
        )
    if devices == {"gpu"}:
        return "Throughput per GPU vs interactivity", "Throughput per GPU (tok/s/GPU)"
    return (
        "Throughput per device vs interactivity (GPUs and CPU hosts)",
        "Throughput per device (tok/s per GPU; CPU groups: per host)",
    )


def plot(summary: dict[str, Any], axis: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    title, y_label = labels(summary, axis)
    scale = 1e-6 if axis == "tokens_per_dollar" else 1.0
    fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
    colours = plt.get_cmap("tab10").colors
    left_out = []
    for i, (name, group) in enumerate(sorted(summary["groups"].items())):
        colour = colours[i % len(colours)]
        pts = [p for p in group["all_points"] if p[axis] is not None]
        if not pts:
            left_out.append(name)
            continue
        xs = [p["interactivity"] for p in pts]
        ys = [p[axis] * scale for p in pts]
        label = f"{name} ({group['hardware']}; {len(pts)} pts)"
        ax.scatter(xs, ys, color=colour, s=28, alpha=0.75, label=label)
        for p, x, y in zip(pts, xs, ys, strict=True):
            ax.annotate(
                str(p["max_concurrency"]), (x, y), textcoords="offset points", xytext=(4, 4),
                fontsize=7, color=colour,
            )  # fmt: skip
        fx, fy = curve([Point(**p) for p in group["frontier"]], axis)
        ax.plot(fx, [y * scale for y in fy], color=colour, linewidth=1.6)
    for x in summary["at"]:
        ax.axvline(x, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(
            f"{x:g} tok/s/user", (x, 1), xycoords=("data", "axes fraction"), xytext=(-10, -6),
            textcoords="offset points", fontsize=8, color="grey", rotation=90, va="top",
        )  # fmt: skip
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel(y_label)
    note = summary.get("note")
    ax.set_title(f"{title}\n{note}" if note else title, fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="best")
    foot = "labels: max concurrency; lines: Pareto frontier (PCHIP)"
    if left_out:
        foot += f"; not priced, left out: {', '.join(left_out)}"
    fig.text(0.01, 0.01, foot, fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
