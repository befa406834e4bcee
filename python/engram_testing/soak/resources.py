"""What the soak's cluster holds over time, whether any of it grows, and the PNG.

Every ``every_s`` seconds: RSS and open file descriptors of each component's server
(the process and its children: SGLang's scheduler and detokenizer) while it is healthy,
of the Ray actor that supervises it, and of ``up`` with Ray's own processes; the bytes
and files in ``/dev/shm``;
the number of processes under ``up`` and of Ray actors among them. A series grows when
the median of the last third of its samples after warm-up exceeds the median of the
first third by more than both a share and an absolute margin (a restarted server starts
small and warms up again: only growth that outlasts that counts).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

MIB = 1 << 20
# series suffix -> (allowed share, allowed absolute) growth; whichever is larger
MARGINS = {
    "rss_mib": (0.25, 64.0),
    "fds": (0.25, 16.0),
    "processes": (0.0, 2.0),
    "ray_actors": (0.0, 0.0),
    "shm_mib": (0.0, 1.0),
    "files": (0.0, 4.0),
}


def _tree(pid: int | None) -> list[psutil.Process]:
    if not pid:
        return []
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


def _usage(procs: list[psutil.Process]) -> tuple[float, int]:
    """RSS (MiB) and open file descriptors, summed over ``procs``."""
    rss, fds = 0, 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            rss += p.memory_info().rss
            fds += p.num_fds()
    return rss / MIB, fds


def shm_usage(root: Path = Path("/dev/shm")) -> tuple[int, int]:
    """Bytes that files under ``root`` occupy (blocks, not apparent sizes), and files."""
    total, count = 0, 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
                count += 1
    return total, count


def sample(up_pid: int, members: dict[str, dict[str, Any]]) -> dict[str, float]:
    """One sample: ``{series: value}`` for the cluster whose ``up`` is ``up_pid``."""
    row: dict[str, float] = {}
    everything = _tree(up_pid)
    counted: set[int] = set()
    for name, m in members.items():
        server, actor = _tree(m.get("pid")), _tree(m.get("supervisor_pid"))[:1]
        counted |= {p.pid for p in (*server, *actor)}
        # NOTE: a server only while it is healthy: one starting (or restarting) is still
        # loading, and its climb to its size is no growth.
        server = server if m.get("state") == "running" else []
        for label, procs in ((f"{name} server", server), (f"{name} actor", actor)):
            if procs:
                row[f"{label} rss_mib"], row[f"{label} fds"] = _usage(procs)
    rest = [p for p in everything if p.pid not in counted]
    row["up+ray rss_mib"], row["up+ray fds"] = _usage(rest)
    row["cluster processes"] = float(len(everything))
    names = []
    for p in everything:
        with contextlib.suppress(psutil.Error):
            names.append(p.name())
    # NOTE: Ray titles an actor's process ray::<Class>; its idle workers and its own
    # agents (ray::DashboardAgent, ray::RuntimeEnvAgent) are no actors.
    row["cluster ray_actors"] = float(
        sum(n.startswith("ray::") and n != "ray::IDLE" and not n.endswith("Agent") for n in names)
    )
    shm, files = shm_usage()
    row["/dev/shm shm_mib"], row["/dev/shm files"] = shm / MIB, float(files)
    return row


@dataclass
class Sampler:
    """Samples every ``every_s`` in a thread: ``rows`` of ``(time.time(), sample)``."""

    every_s: float
    probe: Callable[[], dict[str, float]]

    def __post_init__(self) -> None:
        self.rows: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # NOTE: a sample lost is not a soak lost
                self.rows.append((time.time(), self.probe()))
            if self._stop.wait(self.every_s):
                return


def growth(rows: list[tuple[float, dict[str, float]]], after: float) -> dict[str, dict]:
    """Per series sampled at least 6 times after ``after``: the medians of the first and
    last third and whether it grew beyond its margin."""
    steady = [r for t, r in rows if t >= after]
    out = {}
    for series in sorted({k for r in steady for k in r}):
        values = [r[series] for r in steady if series in r]
        if len(values) < 6:
            continue
        third = len(values) // 3
        first, last = statistics.median(values[:third]), statistics.median(values[-third:])
        share, absolute = MARGINS[series.rsplit(" ", 1)[1]]
        allowed = max(first * share, absolute)
        out[series] = {"first": first, "last": last, "grew": last - first > allowed}
    return out


def plot(
    rows: list[tuple[float, dict[str, float]]],
    faults: list[dict[str, Any]],
    outcomes: list[tuple[float, float, bool]],
    start: float,
    path: Path,
    title: str,
) -> None:
    """Resources over time (minutes from ``start``), the faults as vertical lines, and
    every request's wait (completed or failed) in the last panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("RSS (MiB)", "rss_mib"),
        ("open fds", "fds"),
        ("processes, Ray actors", ("processes", "ray_actors")),
        ("/dev/shm (MiB; files)", ("shm_mib", "files")),
    ]
    fig, axes = plt.subplots(len(panels) + 1, 1, figsize=(12, 16), sharex=True)
    for ax, (ylabel, suffix) in zip(axes, panels, strict=False):
        suffixes = suffix if isinstance(suffix, tuple) else (suffix,)
        series = sorted({k for _, r in rows for k in r if k.rsplit(" ", 1)[1] in suffixes})
        minutes = [(t - start) / 60 for t, _ in rows]
        for s in series:
            # NOTE: NaN where a series has no sample (a server restarting): a gap, no line
            values = [r.get(s, float("nan")) for _, r in rows]
            name = s if len(suffixes) > 1 else s.rsplit(" ", 1)[0]
            ax.plot(minutes, values, marker=".", label=name)
        ax.set_ylabel(ylabel)
        if series:
            ax.legend(fontsize=7, ncol=3, loc="upper left")
    ax = axes[-1]
    for ok, color, name in ((True, "tab:green", "completed"), (False, "tab:red", "failed")):
        pts = [((t - start) / 60, w) for t, w, good in outcomes if good is ok]
        if pts:
            ax.scatter(*zip(*pts, strict=True), s=6, color=color, label=name)
    ax.set_ylabel("request wait (s)")
    ax.set_xlabel("minutes")
    ax.legend(fontsize=7, loc="upper left")
    # NOTE: one colour per component, solid for SIGKILL and dashed for SIGSTOP: a legend,
    # not a label per fault (dozens of them overlap)
    colors = {"prefill": "tab:orange", "decode": "tab:blue", "router": "tab:purple"}
    styles = {"kill": "-", "stop": "--"}
    for ax in axes:
        for f in faults:
            component, signal_ = f["kind"].split(":")
            at = (f["at"] - start) / 60
            ax.axvline(at, color=colors[component], ls=styles[signal_], lw=0.7, alpha=0.7)
    kinds = sorted({f["kind"] for f in faults})
    handles = [
        plt.Line2D([], [], color=colors[k.split(":")[0]], ls=styles[k.split(":")[1]], label=k)
        for k in kinds
    ]
    if handles:
        fig.legend(handles=handles, loc="upper right", ncol=len(handles), fontsize=8)
    fig.suptitle(title, x=0.02, ha="left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
