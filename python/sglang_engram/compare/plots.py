"""PNG charts of a report: tput/GPU and tokens per dollar against interactivity, one
colour per group, frontiers drawn, each point labelled with its concurrency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglang_engram.compare.frontier import Point, curve

AXES = {
    "tput_per_gpu": ("Throughput per GPU (tok/s/GPU)", 1.0),
    "tokens_per_dollar": ("Tokens per dollar (millions of tokens / $)", 1e-6),
}
X_LABEL = "Interactivity (tok/s/user = 1000 / P90 TPOT ms)"


def plot(summary: dict[str, Any], axis: str, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label, scale = AXES[axis]
    fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
    colours = plt.get_cmap("tab10").colors
    for i, (name, group) in enumerate(sorted(summary["groups"].items())):
        colour = colours[i % len(colours)]
        pts = group["all_points"]
        xs = [p["interactivity"] for p in pts]
        ys = [p[axis] * scale for p in pts]
        ax.scatter(xs, ys, color=colour, s=28, alpha=0.75, label=f"{name} ({len(pts)} pts)")
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
    ax.set_ylabel(label)
    note = summary.get("note")
    ax.set_title(f"{title}\n{note}" if note else title, fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="best")
    fig.text(0.01, 0.01, "labels: max concurrency; lines: Pareto frontier (PCHIP)", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
