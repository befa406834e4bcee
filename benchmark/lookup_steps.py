"""Host work of one decode step's ``ssd`` lookup beyond the disk wait, at the batch sizes a
GPU server sees (``bench_lookup.py --step-rows``, or alone:
``python benchmark/lookup_steps.py --table-gib 1 --dir DIR``).

The table is opened as a server opens it (``--engram-ssd-read direct``, a RAM row cache
of 1/16 of the table) and its RAM cache warmed by a few prefill-sized lookups. Then
decode-step lookups of each size (384 rows: 8 sequences x 48 columns; 3,072: 64; 18,432:
384, DeepSeek-V4.1's batch 64 with 6 verify tokens) take turns, order alternating per
round. Each is timed as :meth:`SsdTable.fetch` (dedup, read-ahead handles, RAM cache,
planning, reads, block checks, gathers into the bounce buffer: everything up to the
device copy), minus what the reader spent in system calls waiting for the disk
(:attr:`SsdTable.disk_wait_seconds`). A least-squares line through the per-size medians
splits that host time into a fixed cost per lookup and a cost per row.

Alone, the table is built in ``--dir`` (kept: a later run reuses it) and the row ids drawn
from ``--seed``, so two runs, two commits' libraries under ``ab_commits.py`` among them,
look up the same rows in the same file; the last line is the figures' JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lookup_workload import COLUMNS, build_table, zipf_batches

from engram.ssd.manifest import TableManifest
from engram.tables import TableOptions
from engram.tables.ssd import SsdTable

STEP_ROWS = (384, 3072, 18432)
CACHE_FRACTION = 1 / 16
WARM_BATCHES = 4  # prefill-sized lookups (2,048 tokens) that warm the RAM cache first


def step_batches(
    num_rows: int, sizes: list[int], repeats: int, zipf: float, rng: np.random.Generator
) -> tuple[list[np.ndarray], dict[int, list[np.ndarray]]]:
    """The warming lookups, then ``repeats`` decode-step lookups of each size in rows."""
    warm = zipf_batches(num_rows, 2048, WARM_BATCHES, zipf, rng)
    return warm, {n: zipf_batches(num_rows, n // COLUMNS, repeats, zipf, rng) for n in sizes}


def measure_steps(
    table_dir: Path,
    manifest: TableManifest,
    warm_batches: list[np.ndarray],
    steps: dict[int, list[np.ndarray]],
    read: str = "direct",
) -> dict[str, Any]:
    """Per size: median host us per row (and its range), disk wait and total ms per
    lookup; the fixed and per-row host cost fitted over the sizes."""
    cache = int(CACHE_FRACTION * manifest.num_rows) * manifest.layout.row_bytes
    table = SsdTable(table_dir, manifest, TableOptions("ssd", read=read, ram_cache_bytes=cache))
    table.drop_page_cache()
    for ids in warm_batches:
        table.fetch(torch.from_numpy(ids))
    host: dict[int, list[float]] = {size: [] for size in steps}
    wait: dict[int, list[float]] = {size: [] for size in steps}
    total: dict[int, list[float]] = {size: [] for size in steps}
    sizes = list(steps)
    rounds = min(len(runs) for runs in steps.values())
    for i in range(rounds):
        for size in sizes if i % 2 == 0 else sizes[::-1]:
            ids = torch.from_numpy(steps[size][i])
            waited = table.disk_wait_seconds
            start = time.perf_counter()
            table.fetch(ids)
            took = time.perf_counter() - start
            waited = table.disk_wait_seconds - waited
            host[size].append(took - waited)
            wait[size].append(waited)
            total[size].append(took)
    hit_ratio = table.stats()["ram_cache_hit_ratio"]
    table.close()
    out: dict[str, Any] = {"read": read, "ram_cache_hit_ratio": hit_ratio, "sizes": {}}
    for size in sizes:
        per_row = [h / size * 1e6 for h in host[size]]
        out["sizes"][str(size)] = {
            "host_us_per_row": statistics.median(per_row),
            "host_us_per_row_range": [min(per_row), max(per_row)],
            "disk_wait_ms": statistics.median(wait[size]) * 1e3,
            "total_ms": statistics.median(total[size]) * 1e3,
        }
    medians = [statistics.median(host[size]) for size in sizes]
    per_row_s, fixed_s = np.polyfit(np.array(sizes, dtype=float), medians, 1)
    out["fixed_us_per_lookup"] = fixed_s * 1e6
    out["per_row_us"] = per_row_s * 1e6
    return out


def report_steps(steps: dict[str, Any]) -> None:
    print(
        f"\ndecode-step lookups ({steps['read']} reader, RAM cache 1/16, hit ratio "
        f"{steps['ram_cache_hit_ratio']:.2f}): host work beyond the disk wait"
    )
    for size, got in steps["sizes"].items():
        lo, hi = got["host_us_per_row_range"]
        print(
            f"  {int(size):6,} rows  {got['host_us_per_row']:6.2f} us/row ({lo:.2f}-{hi:.2f})"
            f"   disk wait {got['disk_wait_ms']:7.2f} ms   total {got['total_ms']:7.2f} ms"
        )
    print(
        f"  fitted: {steps['fixed_us_per_lookup']:.0f} us per lookup + "
        f"{steps['per_row_us']:.2f} us per row"
    )


def row_counts(text: str) -> list[int]:
    """``--step-rows``: comma-separated row counts (empty: none)."""
    try:
        return [int(v) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated row counts, not {text!r}") from None


def step_rows_problem(step_rows: list[int]) -> str | None:
    """What is wrong with ``--step-rows`` (each a lookup of whole tokens), or None."""
    if any(n < COLUMNS for n in step_rows):
        return f"--step-rows: each lookup is at least {COLUMNS} rows (one token), not {step_rows}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table-gib", type=float, default=1.0, help="synthetic table (GiB)")
    parser.add_argument("--dir", type=Path, required=True, help="where the table is (kept)")
    parser.add_argument("--step-rows", type=row_counts, default=list(STEP_ROWS))
    parser.add_argument("--repeats", type=int, default=40, help="lookups per step size")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the n-grams")
    parser.add_argument("--seed", type=int, default=0, help="seed of the row ids drawn")
    args = parser.parse_args(argv)
    problem = None
    if not args.dir.is_dir():
        problem = f"--dir {args.dir} is not a directory"
    elif args.table_gib <= 0 or args.repeats < 1 or not args.step_rows:
        problem = "--table-gib, --repeats and --step-rows must be positive"
    else:
        problem = step_rows_problem(args.step_rows)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    table_dir = build_table(args.dir, args.table_gib)
    manifest = TableManifest.load(table_dir)
    rng = np.random.default_rng(args.seed)
    drawn = step_batches(manifest.num_rows, args.step_rows, args.repeats, args.zipf, rng)
    steps = measure_steps(table_dir, manifest, *drawn)
    report_steps(steps)
    print(json.dumps(steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
