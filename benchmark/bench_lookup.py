"""Engram row lookups: RAM vs our SSD tier vs the naive mmap path (CPU-only machine).

Builds a synthetic table of ``--table-gib`` GiB in the SSD layout under a temporary
directory, draws Zipf-distributed n-grams hashed to rows (48 rows per token: one per
hash column, each column owning 1/48 of the table) and measures, as rows/s (requested
rows, duplicates included; median of the repeats):

- ``dram``: the table held in RAM, deduplicated with ``np.unique`` and gathered with
  ``index_select`` (the CPU upper bound; run in a child process so its copy of the
  table does not count towards this process's memory);
- ``ssd_warm`` / ``ssd_cold``: ``SsdTable.fetch`` (dedup, read, check each block's
  hash the first time it is read, gather into staging) with the file in the page cache
  / evicted before each run (unmapped, fadvise DONTNEED, and mincore checked: under 1 %
  resident; each table's residency map then re-learned, the blocks' checks due again);
  ``--compare-checks`` also measures
  the same strategy without the checks, in the same runs, taking turns. Warm, each
  batch is looked up twice: ``ssd_warm_first`` is the first time (the file is in the
  page cache but the tier never read these blocks: their checks are due and their
  pages not yet mapped), ``ssd_warm`` the second (a tier that has served these rows
  before: what "every row in memory" means to it);
- ``naive_warm`` / ``naive_cold``: ids -> ``np.unique`` -> fancy indexing of a fresh
  ``np.memmap`` -> copy into a staging tensor (the public vLLM fork's path), warm also
  twice (``naive_warm_first``: its pages not yet mapped).

Every method ends at the same point: the distinct packed FP8 rows in host memory plus
the inverse index, ready for the device copy. Dequantisation (on the device, identical
for every tier) is left out. ``read_ahead_exposed_ratio``: with ``table.read_ahead`` issued
at admission and a simulated compute window as long as the cold lookup without it,
the lookup time still exposed after the window, over the time without it (prefill);
``decode_read_ahead_exposed_ratio`` the same for decode steps read one step ahead.
``steps`` (``--step-rows``, :mod:`lookup_steps`): the host work of decode-step lookups of
384, 3,072 and 18,432 rows beyond the disk wait, as a server reads them (direct I/O, RAM
cache 1/16 of the table), per row and split into a fixed and a per-row cost.

The last line of output is JSON:
``{"prefill": {...}, "decode": {...}, "read_ahead_exposed_ratio": x,
"cold_resident_fraction": y, "steps": {...}, ...}``. The issue-23 figures (decode
ssd_warm / dram, host us per row at 384 and 18,432 rows, prefill cold ssd / naive, block
checks on / off) in one run: ``python benchmark/bench_lookup.py --table-gib 1
--compare-checks``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lookup_baselines import AnonPeak, DramChild, NaivePath
from lookup_steps import (
    STEP_ROWS,
    measure_steps,
    report_steps,
    row_counts,
    step_batches,
    step_rows_problem,
)
from lookup_workload import build_table, zipf_batches

from engram.files import MIB
from engram.ssd.manifest import TableManifest
from engram.ssd.readers import DEFAULT_READER, reader_names
from engram.tables import TableOptions
from engram.tables.ssd import SsdTable

UNCHECKED = "ssd:unchecked"
BATCHES = {"decode": 64, "prefill": 8192}  # tokens per batch


# ---- the methods ---------------------------------------------------------------------


def time_ssd(table: SsdTable, ids: np.ndarray) -> float:
    start = time.perf_counter()
    table.fetch(torch.from_numpy(ids))
    return time.perf_counter() - start


def warm_file(data: Path) -> None:
    with open(data, "rb", buffering=0) as f:
        while f.read(16 * MIB):
            pass


# ---- the run ---------------------------------------------------------------------------


def measure(
    kind: str,
    runs: list[np.ndarray],
    tables: dict[str, SsdTable],
    naive: NaivePath,
    dram: DramChild,
    cold_runs: int,
) -> dict[str, Any]:
    """Seconds per method (median) for one batch kind. The methods take turns on each
    batch, in alternating order, so a disk or CPU whose speed drifts treats them alike."""
    warm: dict[str, Any] = {
        name: (lambda i, t=table: time_ssd(t, runs[i])) for name, table in tables.items()
    }
    warm["naive"] = lambda i: naive.time(runs[i])
    cold = dict(warm)
    warm["dram"] = lambda i: dram.time(kind, i)
    any_table = next(iter(tables.values()))
    warm_file(any_table.directory / any_table.manifest.data_file)
    for table in tables.values():
        table.refresh_residency()  # what the tier's background sweep learns by itself
    seconds: dict[str, list[float]] = {}
    for i in range(len(runs)):
        for name in warm if i % 2 == 0 else list(warm)[::-1]:
            if name != "dram":  # NOTE: its table is in its own memory, touched at load
                seconds.setdefault(f"{name}_warm_first", []).append(warm[name](i))
            seconds.setdefault(f"{name}_warm", []).append(warm[name](i))
    resident = 0.0
    for i in range(cold_runs):
        for name in cold if i % 2 == 0 else list(cold)[::-1]:
            naive.unmap()
            for table in tables.values():  # unmaps the tables' pages, then drops them
                table.drop_page_cache()
            for table in tables.values():
                # NOTE: each table's residency map, as its sweeper learns within a second:
                # a table dropped before the others' pages were may have re-learned them
                # meanwhile, and would take its cold lookup for a warm one, faulting the
                # pages in one at a time (2-3x slower, the "cost of the checks" measured
                # before this line).
                table.refresh_residency()
            resident = max(resident, any_table.resident_fraction())
            seconds.setdefault(f"{name}_cold", []).append(cold[name](i))
    medians = {key: statistics.median(v) for key, v in seconds.items()}
    return {"seconds": medians, "resident": resident}


def measure_read_ahead(table: SsdTable, runs: list[np.ndarray]) -> tuple[float, int]:
    """The median lookup time still exposed after a read-ahead (at admission for a
    prefill, one step ahead for a decode step) and a compute window as long as the
    lookup without read-ahead (the median cold lookup of these batches), over that window;
    and the most host memory the table held meanwhile (staging plus rows read ahead)."""
    cold = []
    for ids in runs:
        table.drop_page_cache()
        cold.append(time_ssd(table, ids))
    window = statistics.median(cold)
    exposed, held = [], 0
    for ids in runs:
        table.drop_page_cache()
        handle = table.read_ahead(torch.from_numpy(ids))  # at admission / one step ahead
        time.sleep(window)  # the forward pass up to the Engram layer
        exposed.append(time_ssd(table, ids))
        held = max(held, table.memory()["dram"])
        handle.release()
    return statistics.median(exposed) / window, held


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    table_dir = build_table(work, args.table_gib)
    num_rows = json.loads((table_dir / "manifest.json").read_text())["num_rows"]
    rng = np.random.default_rng(args.seed)
    batches = {
        kind: zipf_batches(num_rows, tokens, args.repeats, args.zipf, rng)
        for kind, tokens in BATCHES.items()
    }
    np.savez(
        work / "batches.npz",
        **{f"{k}{i}": b for k, runs in batches.items() for i, b in enumerate(runs)},
    )
    dram = DramChild(table_dir, work / "batches.npz")
    peak = AnonPeak()
    manifest = TableManifest.load(table_dir)
    others = [r for r in reader_names() if r != args.read] if args.compare_readers else []
    tables = {
        f"ssd:{r}": SsdTable(table_dir, manifest, TableOptions("ssd", read=r))
        for r in [args.read, *others]
    }
    if args.compare_checks:
        tables[UNCHECKED] = SsdTable(
            table_dir, manifest, TableOptions("ssd", read=args.read), check_blocks=False
        )
    chosen = tables[f"ssd:{args.read}"]
    naive = NaivePath(chosen.directory / chosen.manifest.data_file, chosen.manifest.layout)
    measured, resident = {}, 0.0
    for kind, runs in batches.items():
        out = measure(kind, runs, tables, naive, dram, args.cold_repeats)
        measured[kind] = {key: runs[0].size / sec for key, sec in out["seconds"].items()}
        resident = max(resident, out["resident"])
    naive.unmap()
    dram.close()
    others_held = 0
    for table in tables.values():
        if table is not chosen:
            others_held += table.memory()["dram"]
            table.close()
    ratio, held = measure_read_ahead(chosen, batches["prefill"])
    decode_ratio, decode_held = measure_read_ahead(chosen, batches["decode"])
    held = max(held, decode_held) + others_held
    chosen.close()
    anon = peak.stop()
    steps = None
    if args.step_rows:
        drawn = step_batches(num_rows, args.step_rows, args.step_repeats, args.zipf, rng)
        steps = measure_steps(table_dir, manifest, *drawn)
    result: dict[str, Any] = {}
    for kind in BATCHES:
        got = measured[kind]
        result[kind] = {
            "dram": got["dram_warm"],
            "ssd_warm": got[f"ssd:{args.read}_warm"],
            "ssd_cold": got[f"ssd:{args.read}_cold"],
            "naive_warm": got["naive_warm"],
            "naive_cold": got["naive_cold"],
            "ssd_warm_first": got[f"ssd:{args.read}_warm_first"],
            "naive_warm_first": got["naive_warm_first"],
        }
    result["read_ahead_exposed_ratio"] = ratio
    result["decode_read_ahead_exposed_ratio"] = decode_ratio
    result["cold_resident_fraction"] = resident
    result["read_strategy"] = args.read
    result["table_gib"] = args.table_gib
    result["unique_fraction"] = {k: np.unique(b[0]).size / b[0].size for k, b in batches.items()}
    result["peak_rss_anon_mib"] = anon / MIB
    result["staging_cache_mib"] = held / MIB
    if steps is not None:
        result["steps"] = steps
    if args.compare_checks:
        result["unchecked"] = {
            k: {
                "ssd_warm": measured[k][f"{UNCHECKED}_warm"],
                "ssd_warm_first": measured[k][f"{UNCHECKED}_warm_first"],
                "ssd_cold": measured[k][f"{UNCHECKED}_cold"],
            }
            for k in BATCHES
        }
    if others:
        result["readers"] = {
            r: {
                k: {
                    "ssd_warm": measured[k][f"ssd:{r}_warm"],
                    "ssd_cold": measured[k][f"ssd:{r}_cold"],
                }
                for k in BATCHES
            }
            for r in [args.read, *others]
        }
    return result


def report(result: dict[str, Any]) -> None:
    methods = [
        "dram",
        "ssd_warm",
        "ssd_warm_first",
        "ssd_cold",
        "naive_warm",
        "naive_warm_first",
        "naive_cold",
    ]
    print(f"\n{'batch':8} " + " ".join(f"{m:>16}" for m in methods) + "   (rows/s)")
    for kind in BATCHES:
        print(f"{kind:8} " + " ".join(f"{result[kind][m]:16,.0f}" for m in methods))
    for name, values in result.get("readers", {}).items():
        for kind in BATCHES:
            warm, cold = values[kind]["ssd_warm"], values[kind]["ssd_cold"]
            print(f"  reader {name:6} {kind:8} warm {warm:12,.0f}  cold {cold:12,.0f}")
    for kind, values in result.get("unchecked", {}).items():
        warm, first, cold = values["ssd_warm"], values["ssd_warm_first"], values["ssd_cold"]
        print(
            f"  no block checks {kind:8} warm {warm:12,.0f}  warm first {first:12,.0f}"
            f"  cold {cold:12,.0f}"
        )
    if "steps" in result:
        report_steps(result["steps"])
    pre, dec = result["prefill"], result["decode"]
    checks = [
        ("decode ssd_warm / dram", dec["ssd_warm"] / dec["dram"], ">= 0.9"),
        ("decode ssd_warm_first / dram", dec["ssd_warm_first"] / dec["dram"], "-"),
        ("prefill ssd_warm / dram", pre["ssd_warm"] / pre["dram"], ">= 0.8"),
        ("decode ssd_cold / naive_cold", dec["ssd_cold"] / dec["naive_cold"], ">= 3"),
        ("prefill ssd_cold / naive_cold", pre["ssd_cold"] / pre["naive_cold"], ">= 1"),
        ("read_ahead_exposed_ratio", result["read_ahead_exposed_ratio"], "<= 0.1"),
        ("decode_read_ahead_exposed_ratio", result["decode_read_ahead_exposed_ratio"], "<= 0.1"),
        ("cold_resident_fraction", result["cold_resident_fraction"], "< 0.01"),
    ]
    for kind, values in result.get("unchecked", {}).items():
        ratio = result[kind]["ssd_cold"] / values["ssd_cold"]
        checks.append((f"{kind} ssd_cold checked / unchecked", ratio, ">= 0.95"))
    for size, got in result.get("steps", {}).get("sizes", {}).items():
        target = "<= 2" if int(size) >= 18432 else "-"
        checks.append((f"host us/row, {int(size):,}-row step", got["host_us_per_row"], target))
    print()
    for name, value, target in checks:
        print(f"{name:32} {value:8.3f}   target {target}")
    print(
        f"{'peak anonymous RSS growth':32} {result['peak_rss_anon_mib']:8.1f} MiB "
        f"(staging + caches + rows read ahead {result['staging_cache_mib']:.1f} MiB; target < 2x)"
    )
    print(json.dumps(result))


def bad_arguments(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line, in one line; ``None`` if nothing."""
    if not args.dir.is_dir():
        return f"--dir {args.dir} is not a directory"
    if args.table_gib <= 0:
        return f"--table-gib must be positive, not {args.table_gib}"
    counts = {"--repeats": args.repeats, "--cold-repeats": args.cold_repeats}
    counts["--step-repeats"] = args.step_repeats
    for flag, n in counts.items():
        if n < 1:
            return f"{flag} must be at least 1, not {n}"
    return step_rows_problem(args.step_rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table-gib", type=float, default=4.0, help="synthetic table size (GiB)")
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path.cwd(),
        help="where the temporary table goes (local disk; default: cwd)",
    )
    parser.add_argument(
        "--read",
        choices=reader_names(),
        default=DEFAULT_READER,
        help="SSD read strategy measured (default %(default)s)",
    )
    parser.add_argument(
        "--compare-readers",
        action="store_true",
        help="also measure ssd_warm/ssd_cold for every read strategy",
    )
    parser.add_argument(
        "--compare-checks",
        action="store_true",
        help="also measure the chosen strategy without its block hash checks (their cost)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="batches per kind (warm runs)")
    parser.add_argument("--cold-repeats", type=int, default=5, help="cold runs per kind")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the n-grams")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the row ids drawn (default %(default)s)"
    )
    parser.add_argument(
        "--step-rows",
        type=row_counts,
        default=list(STEP_ROWS),
        help="rows per decode-step lookup for the host-cost figures (comma-separated; "
        "empty: skip them)",
    )
    parser.add_argument("--step-repeats", type=int, default=15, help="lookups per step size")
    args = parser.parse_args(argv)
    if problem := bad_arguments(args):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="engram-bench-") as work:
        report(run(args, Path(work)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
