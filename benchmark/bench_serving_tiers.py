"""What Engram from SSD costs a real SGLang server: ``ssd`` against ``dram`` and ``off``.

Builds (or reuses) the tiny model with Engram tables of about ``--table-gib`` GiB
(``python -m engram.model build --text-backbone --engram-table-gib G``: the bundled
trained backbone, which writes text; ``--backbone random``: random weights), then starts
``python -m sglang.launch_server`` for every config at once (the CPU engine without a GPU):

* ``dram``: the tables in host memory;
* ``ssd-1/16``: the ssd placement with a RAM cache of 1/16 of the tables, read with
  ``--engram-ssd-read direct`` (O_DIRECT: the page cache is out of play; its resident
  share of the table files is measured before and after, after dropping what the
  conversion left there);
* ``ssd-1/16-seeded``: ``ssd-1/16`` started with ``--engram-seed-profile``: a profile
  that ``python -m engram.profile`` counted over the benchmark text's *train* split, files
  the held-out prompts never come from (``engram_testing.tiers.seed_profile``; built once
  and reused, as the model is);
* ``ssd-1/4``: the same with a RAM cache of 1/4;
* ``off``: no tables (Engram layers pass through).

Every server runs with ``--sleep-on-idle``, so the ones waiting their turn take no CPU,
and ``sglang.benchmark.serving`` (run in-process) drives them in turn: per repeat, per
concurrency, every config back to back (the order rotated each repeat), each run with
prompts of held-out Python source (``engram_testing.bench_text``: a pinned package's
sources, named by path and digest in the output) that no other run gets. A ratio
(ssd/dram, dram/off) is taken within a repeat, between runs minutes apart, and the
median over repeats is reported with its range. Prints per config and concurrency the
median total and output tok/s, P90 TPOT and TTFT, Engram rows/s read from disk, the
RAM-cache hit ratio (of lookups, and with the read-ahead's probes counted in), read-ahead
hits and the exposed read ratio; per ssd config the first pass's RAM-cache hit ratio,
prefill and decode apart (``first_pass_ram_hit_ratio``); the disk's random
4 KiB reads/s before and after the runs (``disk_probe``: a cold row costs about one
such read, so this sets the pace of first reads); whether greedy ssd outputs equal
dram's; the RAM-cache hit ratio against cache size on the rows of all held-out pieces,
empty and seeded; a PNG of both; and a last line of JSON. ``--replay`` runs each point's prompts twice in a row,
and reports ssd/dram of the second pass too: with the rows in the RAM cache, what ssd
costs beyond reading rows of text it has never seen.

    python benchmark/bench_serving_tiers.py --table-gib 8
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from pathlib import Path

from disk_probe import random_reads_per_s
from engram_testing.bench_text import bench_text
from engram_testing.client import generate_ids
from engram_testing.tiers.cache_curve import (
    CURVE_CONFIGS,
    CURVE_FRACTIONS,
    CURVE_KEYS,
    heldout_curves,
)
from engram_testing.tiers.report import (
    drop_page_cache,
    exposed_ratio,
    first_pass_hit_ratios,
    median_figures,
    plot,
    print_ratios,
    print_table,
    ratio_summary,
    resident_fraction,
    table_files,
)
from engram_testing.tiers.runs import SEED, serve_repeats
from engram_testing.tiers.seed_profile import ensure_profile, profile_top
from engram_testing.tiers.servers import (
    BACKBONES,
    CONFIGS,
    build_model,
    check_memory,
    seeded,
    start_servers,
    tokenizer_of,
    wait_seeded,
)
from engram_testing.tiers.workload import (
    heldout_ids,
    prompt_pieces,
    served_prompts,
    write_datasets,
)

from engram.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]

CHECK_PROMPTS, CHECK_PROMPT_TOKENS, CHECK_NEW_TOKENS = 4, 96, 32
# NOTE: the depth the direct reader reaches on a large cold lookup (its plan submits
# every block at once, up to engram.ssd.readers.direct.QUEUE_DEPTH)
DISK_PROBE_DEPTH = 512


def parser() -> argparse.ArgumentParser:
    parser = Parser(prog="benchmark/bench_serving_tiers.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--table-gib", type=float, default=8.0, help="size of the random model's Engram tables"
    )
    parser.add_argument(
        "--backbone",
        choices=list(BACKBONES),
        default="text",
        help="the model's dense weights: trained on text (writes text) or random",
    )
    parser.add_argument("--model", type=Path, help="default models/engram-<BACKBONE>-<G>g")
    parser.add_argument("--ssd-dir", type=Path, help="default models/engram-<BACKBONE>-<G>g-ssd")
    parser.add_argument(
        "--profile",
        type=Path,
        help="the seeded config's profile, made over the benchmark text's train split unless "
        "one of it for this model is there (default models/engram-<BACKBONE>-<G>g-train-profile.npz)",
    )
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"servers to compare, comma-separated, of {', '.join(CONFIGS)} (ssd-1/16: ssd "
        "with a RAM row cache of 1/16 of the tables; -seeded: that cache seeded from a "
        "profile of text disjoint from the prompts)",
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
    return parser


def main(args: argparse.Namespace) -> int:
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
    stem = ROOT / "models" / f"engram-{args.backbone}-{args.table_gib:g}g"
    args.model = args.model or stem
    args.ssd_dir = args.ssd_dir or stem.with_name(stem.name + "-ssd")
    args.profile = args.profile or stem.with_name(stem.name + "-train-profile.npz")
    counts = {c: max(4, args.num_prompts * c) for c in args.concurrencies}
    labels = {f"r{r}_c{c}": counts[c] for r in range(args.repeats) for c in args.concurrencies}
    # NOTE: a request for more prompts than the held-out text gives fails before any build
    prompt_pieces(tokenizer_of(args.model, args.backbone), args.input_len, sum(labels.values()))
    text = {split: bench_text(split) for split in ("heldout", "train")}
    print(f"prompts: {text['heldout'].describe()}", flush=True)
    if any(seeded(n) for n in configs):
        print(f"seed profile text: {text['train'].describe()}", flush=True)
    work = args.out
    work.mkdir(parents=True, exist_ok=True)

    model = build_model(args.table_gib, args.model, args.backbone)
    if any(seeded(n) for n in configs):
        top = profile_top(model, max(CURVE_FRACTIONS))  # NOTE: enough for every curve point
        ensure_profile(model, args.profile, top)
    datasets = write_datasets(model, work, labels, args.input_len)
    last = f"r{args.repeats - 1}_c{args.concurrencies[-1]}"
    served = served_prompts(
        datasets[last], model, counts[args.concurrencies[-1]], args.input_len,
        args.output_len, 1.0, SEED,
    )  # fmt: skip
    checks = [p[:CHECK_PROMPT_TOKENS] for p in served[:CHECK_PROMPTS]]

    residency, disk = {}, {}
    with ExitStack() as stack:
        urls = start_servers(stack, configs, model, args, work)
        seeding = {n: wait_seeded(url) for n, url in urls.items() if seeded(n)}
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
        "text": {split: t.record() for split, t in text.items()},
        "configs": {n: {str(c): r for c, r in by.items()} for n, by in results.items()},
        "runs": {n: {str(c): rs for c, rs in by.items()} for n, by in runs.items()},
        "page_cache_resident": residency,
        "disk_random_4k_reads_per_s": disk,
        # NOTE: per ssd config, over its first passes: RAM-cache hits over probes of
        # lookups and read-ahead together ("all"); "prefill" / "decode": the read-ahead's
        # probes of prompts at admission / of the next decode step; "lookups": the
        # lookups' own probes (rows no read-ahead handle done reading held, either phase).
        "first_pass_ram_hit_ratio": {
            n: first_pass_hit_ratios(by) for n, by in runs.items() if CONFIGS[n]
        },
        "seeding": seeding,
    }
    if replays:
        summary["replays"] = {n: {str(c): rs for c, rs in by.items()} for n, by in replays.items()}
    summary |= ratio_summary(runs, replays)
    if "ssd-1/16" in runs:
        r = exposed_ratio([f for rs in runs["ssd-1/16"].values() for f in rs])
        summary["read_ahead_exposed_ratio"] = None if r is None else round(r, 4)
    if "dram" in outputs:
        summary["ssd_outputs_equal_dram"] = {
            n: sum(a == b for a, b in zip(outputs[n], outputs["dram"], strict=True)) / len(checks)
            for n in outputs
            if n.startswith("ssd")
        }
    print()
    print_ratios(summary)
    for name, ratios_of in summary["first_pass_ram_hit_ratio"].items():
        parts = ", ".join(f"{k} {v}" for k, v in ratios_of.items() if k != "rows_probed")
        print(f"first-pass RAM-cache hit ratio of {name}: {parts}")
    for name, done in seeding.items():
        print(
            f"{name}: seeded {done['rows']:,.0f} rows into its RAM caches at start "
            f"({done['table_seconds']:.1f} s, summed over its tables)"
        )
    print(f"read_ahead_exposed_ratio: {summary.get('read_ahead_exposed_ratio')}")
    print(f"page cache resident share of the table files: {residency}")
    if disk:
        print(
            f"the disk's random 4 KiB reads/s at depth {DISK_PROBE_DEPTH} "
            f"(benchmark/disk_probe.py): {disk['before']:,.0f} before the runs, "
            f"{disk['after']:,.0f} after"
        )
    print(f"greedy outputs equal to dram's: {summary.get('ssd_outputs_equal_dram')}")

    # NOTE: the curve replays every held-out piece (the served prompts are a sample of
    # them), prefill rows only: decode rows follow the model's own outputs.
    pieces = heldout_ids(model, args.input_len)
    curves = heldout_curves(model, pieces, args.profile if seeding else None)
    summary |= {CURVE_KEYS[label]: curve for label, curve in curves.items()}
    for i, fraction in enumerate(CURVE_FRACTIONS):
        ratios_at = ", ".join(f"{k} {c['points'][i]['hit_ratio']:.3f}" for k, c in curves.items())
        print(f"RAM cache {fraction:.4f} of the table: hit ratio {ratios_at}")
    print(f"90 % of the hits at {summary['cache_curve']['fraction_for_90pct_of_hits']}")
    title = (
        f"Engram tables of {args.table_gib:g} GiB, real CPU SGLang servers "
        f"(median of {args.repeats} interleaved repeats)"
    )
    png = plot(
        results, work / "serving_tiers.png", title, curves, CONFIGS["ssd-1/16"], CURVE_CONFIGS
    )
    summary["png"] = str(png)
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    options = parser().parse_args()
    sys.exit(run(lambda: main(options), options))
