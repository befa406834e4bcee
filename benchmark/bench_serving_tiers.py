"""What Engram from SSD costs a real SGLang server: ``ssd`` against ``dram`` and ``off``.

Builds (or reuses) the tiny backbone with random Engram tables of about ``--table-gib``
GiB (``python -m engram.model build --random --engram-table-gib G``), then starts
``python -m sglang.launch_server`` for every config at once (the CPU engine without a GPU):

* ``dram``: the tables in host memory;
* ``ssd-1/16``: the ssd placement with a RAM cache of 1/16 of the tables, read with
  ``--engram-ssd-read direct`` (O_DIRECT: the page cache is out of play; its resident
  share of the table files is measured before and after, after dropping what the
  conversion left there);
* ``ssd-1/4``: the same with a RAM cache of 1/4;
* ``off``: no tables (Engram layers pass through).

Every server runs with ``--sleep-on-idle``, so the ones waiting their turn take no CPU,
and ``python -m sglang.benchmark.serving`` drives them in turn: per repeat, per
concurrency, every config back to back (the order rotated each repeat), each run with
prompts of held-out Python source (``tiers_workload``) that no other run gets. A ratio
(ssd/dram, dram/off) is taken within a repeat, between runs minutes apart, and the
median over repeats is reported with its range. Prints per config and concurrency the
median total and output tok/s, P90 TPOT and TTFT, Engram rows/s read from disk, the
RAM-cache hit ratio, read-ahead hits and the exposed read ratio; the disk's random
4 KiB reads/s before and after the runs (``disk_probe``: a cold row costs about one
such read, so this sets the pace of first reads); whether greedy ssd outputs equal
dram's; the RAM-cache hit ratio against cache size on the rows of all held-out pieces;
a PNG; and a last line of JSON. ``--replay`` runs each point's prompts twice in a row,
and reports ssd/dram of the second pass too: with the rows in the RAM cache, what ssd
costs beyond reading rows of text it has never seen.

    python benchmark/bench_serving_tiers.py --table-gib 8
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import psutil
from disk_probe import random_reads_per_s
from engram_testing.client import generate_ids, settled_metrics
from engram_testing.server import sglang_server
from engram_testing.tiers.report import (
    describe_ratios,
    drop_page_cache,
    exposed_ratio,
    median_figures,
    median_of,
    plot,
    print_table,
    repeat_ratios,
    resident_fraction,
    run_figures,
    server_cpu_seconds,
    table_files,
)
from engram_testing.tiers.workload import cache_curve, heldout_ids, served_prompts, write_datasets

ROOT = Path(__file__).resolve().parents[1]

CONFIGS = {"dram": None, "ssd-1/16": 1 / 16, "ssd-1/4": 1 / 4, "off": None}
CURVE_FRACTIONS = [1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2]
SEED = 1
CHECK_PROMPTS, CHECK_PROMPT_TOKENS, CHECK_NEW_TOKENS = 4, 96, 32
# NOTE: the depth the direct reader reaches on a large cold lookup (its plan submits
# every block at once, up to engram.ssd.readers.direct.QUEUE_DEPTH)
DISK_PROBE_DEPTH = 512
# NOTE: one tiny-model CPU server's memory besides its tables and cache (its scheduler,
# tokenizer and detokenizer processes: ~2.6 GiB measured, four servers at once on 24 GiB).
SERVER_GIB = 2.5
RATIOS = [  # (JSON key, numerator config, denominator config, figure)
    ("ssd_over_dram_throughput", "ssd-1/16", "dram", "total_tok_s"),
    ("ssd_over_dram_p90_tpot", "ssd-1/16", "dram", "p90_tpot_ms"),
    ("ssd_quarter_over_dram_throughput", "ssd-1/4", "dram", "total_tok_s"),
    ("dram_over_off_throughput", "dram", "off", "total_tok_s"),
    ("dram_over_off_p90_tpot", "dram", "off", "p90_tpot_ms"),
]


def build_model(table_gib: float, out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "engram.model", "build", "--random", "--engram-table-gib",
         f"{table_gib:g}", "--out", str(out), "--reuse"],
        check=True,
    )  # fmt: skip
    return out


def server_args(name: str, table_gib: float, ssd_dir: Path) -> list[str]:
    # NOTE: every config runs SGLang's default overlap scheduler (an ssd table reads the
    # next decode step's rows from the launched step's sampled tokens);
    # --sleep-on-idle: a CPU server otherwise spins a core while it waits its turn.
    fraction = CONFIGS[name]
    if fraction is None:
        return ["--sleep-on-idle", "--engram-offload", name]
    return [
        "--sleep-on-idle", "--engram-offload", "ssd", "--engram-ssd-dir", str(ssd_dir),
        "--engram-ram-cache-gb", f"{table_gib * fraction:.6g}", "--engram-ssd-read", "direct",
    ]  # fmt: skip


def bench(url: str, model: Path, dataset: Path, conc: int, n: int, args, out: Path) -> dict:
    """One ``sglang.benchmark.serving`` run; its result record."""
    result = out.with_suffix(".jsonl")
    result.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "sglang.benchmark.serving", "--backend", "sglang",
        "--base-url", url, "--model", str(model), "--tokenizer", str(model),
        "--dataset-name", "random", "--dataset-path", str(dataset), "--tokenize-prompt",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--random-range-ratio", "1.0", "--num-prompts", str(n), "--max-concurrency", str(conc),
        "--seed", str(SEED), "--disable-tqdm", "--output-file", str(result),
        "--flush-cache",  # NOTE: a replay's prefill is computed again, not a prefix hit
    ]  # fmt: skip
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, check=True, timeout=args.timeout_s, stdout=log, stderr=log)
    return json.loads(result.read_text().splitlines()[-1])


def no_metrics(url: str) -> dict[str, float]:
    return {}


def start_servers(stack: ExitStack, configs: list[str], model: Path, args, work: Path) -> dict:
    """Every config's server, started one after another; their URLs."""
    urls = {}
    for name in configs:
        flags = server_args(name, args.table_gib, args.ssd_dir)
        print(f"[{name}] starting server: {' '.join(flags)}", flush=True)
        log = work / f"{slug(name)}.server.log"
        urls[name] = stack.enter_context(sglang_server(model, *flags, log=log, timeout_s=1800))
    return urls


def slug(name: str) -> str:
    return name.replace("/", "_")


def check_memory(configs: list[str], table_gib: float) -> str | None:
    """Why the servers would not fit in this machine's memory, or None."""
    need = sum(
        SERVER_GIB + table_gib * (CONFIGS[n] or (1.0 if n == "dram" else 0.0)) for n in configs
    )
    have = psutil.virtual_memory().available / 2**30
    if need <= have:
        return None
    return (
        f"error: the servers of {', '.join(configs)} need about {need:.1f} GiB of memory at "
        f"once, {have:.1f} GiB is available; pass fewer --configs or a smaller --table-gib"
    )


def measure(
    url: str, name: str, model: Path, dataset: Path, conc: int, n: int, args, out: Path
) -> dict:
    """One run of config ``name``: its figures (``run_figures``)."""
    # NOTE: only ssd tables count rows; the others' /metrics need no settling.
    sample = settled_metrics if CONFIGS[name] else no_metrics
    before, cpu = sample(url), server_cpu_seconds(url)
    result = bench(url, model, dataset, conc, n, args, out)
    return run_figures(result, before, sample(url), server_cpu_seconds(url) - cpu)


def serve_repeats(
    urls: dict, model: Path, datasets: dict, counts: dict, args, work: Path
) -> tuple[dict, dict]:
    """Per config and concurrency, the figures of each repeat: of the first pass over
    its prompts, and of the replay (``--replay``: the same prompts again at once)."""
    configs = list(urls)
    runs = {n: {c: [] for c in args.concurrencies} for n in configs}
    replays = {n: {c: [] for c in args.concurrencies} for n in configs} if args.replay else {}
    passes = [(runs, "")] + ([(replays, "_replay")] if replays else [])
    for rep in range(args.repeats):
        k = rep % len(configs)
        order = configs[k:] + configs[:k]
        for conc in args.concurrencies:
            for name in order:
                for into, tag in passes:
                    out = work / f"{slug(name)}_r{rep}_c{conc}{tag}"
                    dataset = datasets[f"r{rep}_c{conc}"]
                    figures = measure(
                        urls[name], name, model, dataset, conc, counts[conc], args, out
                    )
                    into[name][conc].append(figures)
                    print(f"[{name}] repeat {rep} c={conc}{tag}: {json.dumps(figures)}", flush=True)
    return runs, replays


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--table-gib", type=float, default=8.0, help="size of the random model's Engram tables"
    )
    parser.add_argument("--model", type=Path, help="default models/engram-random-<G>g")
    parser.add_argument("--ssd-dir", type=Path, help="default models/engram-random-<G>g-ssd")
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"servers to compare, comma-separated, of {', '.join(CONFIGS)} (ssd-1/16: ssd "
        "with a RAM row cache of 1/16 of the tables)",
    )
    parser.add_argument(
        "--concurrencies", default="1,8,32", help="client concurrencies, comma-separated"
    )
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each point")
    parser.add_argument("--num-prompts", type=int, default=3, help="per unit of concurrency")
    parser.add_argument("--input-len", type=int, default=256, help="prompt tokens")
    parser.add_argument("--output-len", type=int, default=64, help="output tokens")
    parser.add_argument(
        "--timeout-s", type=int, default=1800, help="limit of each server start and run"
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="run each point's prompts a second time at once (prefix cache flushed): ssd "
        "then finds their rows in its RAM cache, which isolates the cost of first reads",
    )
    parser.add_argument(
        "--disk-probe-s",
        type=float,
        default=3.0,
        help="seconds of random 4 KiB reads of a table file before and after the runs "
        "(benchmark/disk_probe.py): what the disk gave while the servers ran; 0 skips it",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "out" / "bench_serving_tiers",
        help="folder of the logs, results, summary.json and the plot",
    )
    args = parser.parse_args()
    configs = args.configs.split(",")
    if unknown := set(configs) - set(CONFIGS):
        print(f"error: unknown configs {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
        return 2
    if args.repeats < 1:
        print(f"error: --repeats must be at least 1, not {args.repeats}")
        return 2
    if args.disk_probe_s < 0:
        print(f"error: --disk-probe-s must be 0 or more, not {args.disk_probe_s}")
        return 2
    if problem := check_memory(configs, args.table_gib):
        print(problem)
        return 2
    args.concurrencies = [int(c) for c in args.concurrencies.split(",")]
    stem = ROOT / "models" / f"engram-random-{args.table_gib:g}g"
    args.model = args.model or stem
    args.ssd_dir = args.ssd_dir or stem.with_name(stem.name + "-ssd")
    work = args.out
    work.mkdir(parents=True, exist_ok=True)

    model = build_model(args.table_gib, args.model)
    counts = {c: max(4, args.num_prompts * c) for c in args.concurrencies}
    datasets = write_datasets(
        model, work,
        {f"r{r}_c{c}": counts[c] for r in range(args.repeats) for c in args.concurrencies},
        args.input_len,
    )  # fmt: skip
    last = f"r{args.repeats - 1}_c{args.concurrencies[-1]}"
    served = served_prompts(
        datasets[last], model, counts[args.concurrencies[-1]], args.input_len,
        args.output_len, 1.0, SEED,
    )  # fmt: skip
    checks = [p[:CHECK_PROMPT_TOKENS] for p in served[:CHECK_PROMPTS]]

    residency, disk = {}, {}
    with ExitStack() as stack:
        urls = start_servers(stack, configs, model, args, work)
        files = table_files(args.ssd_dir) if any(CONFIGS[n] for n in configs) else []
        probe = files and args.disk_probe_s > 0
        if files:
            drop_page_cache(files)  # what the conversion (or the servers' checks) left there
            residency["before"] = resident_fraction(files)
        if probe:
            disk["before"] = random_reads_per_s(files[-1], DISK_PROBE_DEPTH, args.disk_probe_s)
        runs, replays = serve_repeats(urls, model, datasets, counts, args, work)
        if probe:
            disk["after"] = random_reads_per_s(files[-1], DISK_PROBE_DEPTH, args.disk_probe_s)
        if files:
            residency["after"] = resident_fraction(files)
        outputs = {
            n: [generate_ids(url, p, CHECK_NEW_TOKENS) for p in checks] for n, url in urls.items()
        }

    results = {n: {c: median_figures(rs) for c, rs in by.items()} for n, by in runs.items()}
    print()
    print_table(results)
    summary = {
        "table_gib": args.table_gib,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "num_prompts": counts,
        "repeats": args.repeats,
        "configs": {n: {str(c): r for c, r in by.items()} for n, by in results.items()},
        "runs": {n: {str(c): rs for c, rs in by.items()} for n, by in runs.items()},
        "page_cache_resident": residency,
        "disk_random_4k_reads_per_s": disk,
    }
    ratios = [(runs, *ratio) for ratio in RATIOS]
    if replays:
        ratios.append((replays, "replayed_ssd_over_dram_throughput", "ssd-1/16", "dram", "total_tok_s"))  # fmt: skip
        summary["replays"] = {n: {str(c): rs for c, rs in by.items()} for n, by in replays.items()}
    for source, key, num, den, figure in ratios:
        per_repeat = repeat_ratios(source, num, den, figure)
        summary[key] = {c: median_of(r) for c, r in per_repeat.items()}
        summary[key + "_per_repeat"] = per_repeat
    if "ssd-1/16" in runs:
        r = exposed_ratio([f for rs in runs["ssd-1/16"].values() for f in rs])
        summary["prefetch_exposed_ratio"] = None if r is None else round(r, 4)
    if "dram" in outputs:
        summary["ssd_outputs_equal_dram"] = {
            n: sum(a == b for a, b in zip(outputs[n], outputs["dram"], strict=True)) / len(checks)
            for n in outputs
            if n.startswith("ssd")
        }
    print()
    printed = ("ssd_over_dram_throughput", "ssd_over_dram_p90_tpot", "dram_over_off_throughput")
    for key in printed + (("replayed_ssd_over_dram_throughput",) if replays else ()):
        print(f"{key}: {describe_ratios(summary[key + '_per_repeat'])}")
    print(f"prefetch_exposed_ratio: {summary.get('prefetch_exposed_ratio')}")
    print(f"page cache resident share of the table files: {residency}")
    if disk:
        print(
            f"the disk's random 4 KiB reads/s at depth {DISK_PROBE_DEPTH} "
            f"(benchmark/disk_probe.py): {disk['before']:,.0f} before the runs, "
            f"{disk['after']:,.0f} after"
        )
    print(f"greedy outputs equal to dram's: {summary.get('ssd_outputs_equal_dram')}")

    # NOTE: the curve replays every held-out piece (the served prompts are a sample of
    # them), prefill rows only: decode rows follow the random model's own outputs.
    summary["cache_curve"] = cache_curve(model, heldout_ids(model, args.input_len), CURVE_FRACTIONS)
    for p in summary["cache_curve"]["points"]:
        print(f"RAM cache {p['fraction']:.4f} of the table: hit ratio {p['hit_ratio']:.3f}")
    print(f"90 % of the hits at {summary['cache_curve']['fraction_for_90pct_of_hits']}")
    title = (
        f"Engram tables of {args.table_gib:g} GiB, real CPU SGLang servers "
        f"(median of {args.repeats} interleaved repeats)"
    )
    png = plot(results, work / "serving_tiers.png", title)
    summary["png"] = str(png)
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
