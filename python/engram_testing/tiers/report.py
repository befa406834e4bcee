"""Measurements and output of ``bench_serving_tiers.py``: the page-cache residency of
the ssd table files, one run's figures from SGLang's benchmark result and the
``sglang:engram_ssd_*`` counters it moved, the printed table, and the PNG (throughput
against P90 interactivity, the comparison report's axes)."""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from sglang_engram.compare.plots import X_LABEL

from engram.ssd.row_cache import PROBERS
from engram.ssd.sysmem import mincore
from engram_testing.tiers.cache_curve import draw_curves

# NOTE: the first-pass hit ratio's parts, by who asked the RAM cache: the read-ahead of a
# prompt at its admission (its prefill's rows), of a decode step (the next step's rows),
# and lookups themselves (rows no read-ahead handle done reading held: either phase).
PHASES = {"prefill": "prompt_ahead", "decode": "decode_ahead", "lookups": "lookup"}


def table_files(ssd_dir: Path) -> list[Path]:
    """The data files of the converted tables under ``ssd_dir``."""
    return sorted(ssd_dir.rglob("rows.bin"))


def drop_page_cache(paths: list[Path]) -> None:
    """Evict the files' clean pages (``POSIX_FADV_DONTNEED``, any process may ask)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_fraction(paths: list[Path]) -> float:
    """Share of the files' pages in the page cache (mincore on a fresh mapping)."""
    resident = total = 0
    for path in paths:
        size = path.stat().st_size
        with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            view = np.frombuffer(mm, dtype=np.uint8)
            try:
                pages = mincore(view.ctypes.data, size)
            finally:
                del view
        resident += int((pages & 1).sum())
        total += pages.size
    return resident / total if total else 0.0


def server_cpu_seconds(url: str) -> float:
    """CPU seconds (user + system) used so far by the server listening at ``url``: its
    ``launch_server`` process and every process under it (scheduler, detokenizer)."""
    port = url.rsplit(":", 1)[1]
    total = 0.0
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "sglang.launch_server" not in cmd or f"--port {port} " not in " ".join(cmd) + " ":
            continue
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = p.cpu_times()
                total += times.user + times.system
    return total


def run_figures(
    result: dict[str, Any], before: dict[str, float], after: dict[str, float], cpu_s: float
) -> dict:
    """One config and concurrency: SGLang's benchmark figures, the Engram counters'
    growth over the run (``/metrics`` samples before and after) and the server's CPU
    seconds over it (``cpu_s``)."""

    def grown(name: str) -> float:
        key = f"sglang:engram_{name}_total"
        return after.get(key, 0.0) - before.get(key, 0.0)

    hits, misses = grown("ssd_ram_cache_hits"), grown("ssd_ram_cache_misses")
    probes = {}
    for by in PROBERS:
        stem = "ssd_ram_cache" if by == "lookup" else f"ssd_ram_cache_{by}"
        probes[f"ram_{by}_hits"] = grown(f"{stem}_hits")
        probes[f"ram_{by}_misses"] = grown(f"{stem}_misses")
    disk_rows = grown("ssd_lookup_rows_read") + grown("ssd_ahead_rows_read")
    lookup, ahead = grown("ssd_lookup_read_seconds"), grown("ssd_ahead_read_seconds")
    waits = grown("ssd_handle_wait_seconds")
    duration = float(result["duration"])
    return {
        "total_tok_s": float(result["total_throughput"]),
        "output_tok_s": float(result["output_throughput"]),
        "p90_tpot_ms": float(result["p90_tpot_ms"]),
        "p90_ttft_ms": float(result["p90_ttft_ms"]),
        "duration_s": duration,
        "completed": int(result["completed"]),
        # NOTE: rows read from the table files by lookups and by the read-ahead (the RAM
        # cache's misses count only lookups' rows).
        "disk_rows_s": disk_rows / duration if duration else 0.0,
        "ram_cache_hit_ratio": hits / (hits + misses) if hits + misses else None,
        # NOTE: lookups' and read-ahead's probes together: what the RAM cache served
        "ram_all_hit_ratio": _hit_ratio([probes]),
        **probes,
        "read_ahead_hits": grown("ssd_prefetch_hits"),
        "exposed_read_s": lookup + waits,
        "total_read_s": lookup + ahead,
        # NOTE: on a CPU-bound machine, CPU time per token is what a tier costs.
        "server_cpu_ms_per_token": 1e3 * cpu_s / max(1, int(result["total_output_tokens"])),
    }


def _hit_ratio(runs: list[dict], probers: tuple[str, ...] = PROBERS) -> float | None:
    """RAM-cache hits over probes of ``probers``, summed over ``runs``; None without any."""
    hits = sum(r[f"ram_{by}_hits"] for r in runs for by in probers)
    misses = sum(r[f"ram_{by}_misses"] for r in runs for by in probers)
    return round(hits / (hits + misses), 4) if hits + misses else None


def first_pass_hit_ratios(runs: dict[int, list[dict]]) -> dict[str, Any]:
    """One config's RAM-cache hits over probes in all its first-pass ``runs`` (per
    concurrency, per repeat): ``all`` (lookups and read-ahead), and apart by
    :data:`PHASES`, with the rows probed of each."""
    flat = [r for rs in runs.values() for r in rs]
    out: dict[str, Any] = {"all": _hit_ratio(flat)}
    for phase, by in PHASES.items():
        out[phase] = _hit_ratio(flat, (by,))
    out["rows_probed"] = {
        phase: int(sum(r[f"ram_{by}_hits"] + r[f"ram_{by}_misses"] for r in flat))
        for phase, by in PHASES.items()
    }
    return out


def exposed_ratio(runs: list[dict]) -> float | None:
    """Disk read time read-ahead did not hide: (lookup reads + waits on read-ahead) over
    all read time (lookup + read-ahead), summed over ``runs``."""
    total = sum(r["total_read_s"] for r in runs)
    return sum(r["exposed_read_s"] for r in runs) / total if total else None


def median_of(values: list[float]) -> float | None:
    return round(float(np.median(values)), 4) if values else None


def median_figures(runs: list[dict]) -> dict:
    """Each figure's median over repeated runs of one point (None where no run has it)."""
    return {key: median_of([r[key] for r in runs if r[key] is not None]) for key in runs[0]}


def repeat_ratios(runs: dict, num: str, den: str, figure: str) -> dict[str, list[float]]:
    """Per concurrency, ``figure`` of ``num`` over that of ``den`` in each repeat (the
    two runs back to back)."""
    if num not in runs or den not in runs:
        return {}
    return {
        str(c): [round(a[figure] / b[figure], 4) for a, b in zip(rs, runs[den][c], strict=True)]
        for c, rs in runs[num].items()
        if c in runs[den]
    }


RATIOS = [  # (JSON key, numerator config, denominator config, figure)
    ("ssd_over_dram_throughput", "ssd-1/16", "dram", "total_tok_s"),
    ("ssd_over_dram_p90_tpot", "ssd-1/16", "dram", "p90_tpot_ms"),
    ("seeded_ssd_over_dram_throughput", "ssd-1/16-seeded", "dram", "total_tok_s"),
    ("seeded_ssd_over_dram_p90_tpot", "ssd-1/16-seeded", "dram", "p90_tpot_ms"),
    ("ssd_quarter_over_dram_throughput", "ssd-1/4", "dram", "total_tok_s"),
    ("dram_over_off_throughput", "dram", "off", "total_tok_s"),
    ("dram_over_off_p90_tpot", "dram", "off", "p90_tpot_ms"),
]
REPLAYED = ("replayed_ssd_over_dram_throughput", "ssd-1/16", "dram", "total_tok_s")


def ratio_summary(runs: dict, replays: dict) -> dict[str, dict]:
    """Each of :data:`RATIOS` (and :data:`REPLAYED` of the replays, if any): per
    concurrency, its median over repeats and (``KEY_per_repeat``) its value in each."""
    out: dict[str, dict] = {}
    for source, (key, num, den, figure) in [(runs, r) for r in RATIOS] + (
        [(replays, REPLAYED)] if replays else []
    ):
        per_repeat = repeat_ratios(source, num, den, figure)
        out[key] = {c: median_of(r) for c, r in per_repeat.items()}
        out[key + "_per_repeat"] = per_repeat
    return out


def print_ratios(summary: dict) -> None:
    """The ratios of :func:`ratio_summary` that ``summary`` holds (ssd-1/4's left out)."""
    keys = [key for key, *_ in RATIOS if "quarter" not in key] + [REPLAYED[0]]
    for key in keys:
        if summary.get(key + "_per_repeat"):
            print(f"{key}: {describe_ratios(summary[key + '_per_repeat'])}")


def describe_ratios(per_repeat: dict[str, list[float]]) -> str:
    """``c=8: 0.91 (0.88-0.95)``: the median and range over repeats, per concurrency."""
    return ", ".join(
        f"c={c}: {np.median(r):.2f} ({min(r):.2f}-{max(r):.2f})" for c, r in per_repeat.items()
    )


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_table(results: dict[str, dict[int, dict]]) -> None:
    """Medians per config and concurrency. ``RAM hit``: lookups' RAM-cache hit ratio;
    ``+ahead``: the read-ahead's probes counted in (what the cache served)."""
    head = (
        f"{'config':<16}{'conc':>5}{'total tok/s':>12}{'out tok/s':>10}{'P90 TPOT':>10}"
        f"{'P90 TTFT':>10}{'disk rows/s':>12}{'RAM hit':>8}{'+ahead':>7}{'ahead hits':>11}"
        f"{'exposed':>8}{'CPU ms/tok':>11}"
    )
    print(head)
    print("-" * len(head))
    for name, by_conc in results.items():
        for conc, r in sorted(by_conc.items()):
            ssd = r["total_read_s"] > 0 or r["ram_cache_hit_ratio"] is not None
            print(
                f"{name:<16}{conc:>5}{r['total_tok_s']:>12.1f}{r['output_tok_s']:>10.1f}"
                f"{r['p90_tpot_ms']:>8.1f}ms{r['p90_ttft_ms']:>8.0f}ms"
                f"{_cell(r['disk_rows_s'] if ssd else None, '12.0f'):>12}"
                f"{_cell(r['ram_cache_hit_ratio'], '8.3f'):>8}"
                f"{_cell(r['ram_all_hit_ratio'], '7.3f'):>7}"
                f"{_cell(r['read_ahead_hits'] if ssd else None, '11.0f'):>11}"
                f"{_cell(exposed_ratio([r]) if ssd else None, '8.3f'):>8}"
                f"{_cell(r.get('server_cpu_ms_per_token'), '11.1f'):>11}"
            )
    print("RAM hit: lookups' RAM-cache hit ratio; +ahead: the read-ahead's probes counted in")


def plot(
    results: dict[str, dict[int, dict]],
    path: Path,
    title: str,
    curves: dict[str, dict[str, Any]] | None = None,
    served_fraction: float | None = None,
    curve_configs: dict[str, str] | None = None,
) -> Path:
    """Total throughput against interactivity (1000 / P90 TPOT), one line per config,
    each point labelled with its concurrency; beside it, with ``curves``, the RAM-cache
    hit ratio against cache size (``cache_curve.draw_curves``), each curve in the colour
    of the config ``curve_configs`` names for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if curves:
        fig, (ax, right) = plt.subplots(1, 2, figsize=(16, 6.5), dpi=110)
    else:
        fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
    markers = "osD^v"
    colors = {}
    for i, (name, by_conc) in enumerate(results.items()):
        concs = sorted(by_conc)
        xs = [1000.0 / by_conc[c]["p90_tpot_ms"] for c in concs]
        ys = [by_conc[c]["total_tok_s"] for c in concs]
        line = ax.plot(xs, ys, marker=markers[i % len(markers)], linewidth=1.4, label=name)[0]
        colors[name] = line.get_color()
        for c, x, y in zip(concs, xs, ys, strict=True):
            ax.annotate(
                str(c), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8,
                color=line.get_color(),
            )  # fmt: skip
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel("Total throughput (tok/s, one CPU server)")
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=9, loc="best")
    if curves:
        named = (curve_configs or {}).items()
        draw_curves(right, curves, served_fraction, {k: colors[c] for k, c in named if c in colors})
    fig.text(0.01, 0.01, "labels: max concurrency", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
