"""What Engram from SSD costs a real SGLang server: ``ssd`` against ``dram`` and ``off``.

Builds (or reuses) the tiny backbone with random Engram tables of about ``--table-gib``
GiB (``python -m engram.model build --random --engram-table-gib G``), then starts
``python -m sglang.launch_server`` once per config (the CPU engine without a GPU):

* ``dram``: the tables in host memory;
* ``ssd-1/16``: the ssd placement with a RAM cache of 1/16 of the tables, read with
  ``--engram-ssd-read direct`` (O_DIRECT: the page cache is out of play; its resident
  share of the table files is measured before and after, after dropping what the
  conversion left there);
* ``ssd-1/4``: the same with a RAM cache of 1/4;
* ``off``: no tables (Engram layers pass through).

Each is driven by ``python -m sglang.benchmark.serving`` at each concurrency with
prompts of held-out Python source (``tiers_workload``), the same prompts for every
config. Prints per config and concurrency total and output tok/s, P90 TPOT and TTFT,
Engram rows/s read from disk, the RAM-cache hit ratio, read-ahead hits and the exposed
read ratio; the ratios ssd/dram and dram/off; whether greedy ssd outputs equal dram's;
the RAM-cache hit ratio against cache size on the rows of all held-out pieces; a PNG; and a last line
of JSON.

    python benchmark/bench_serving_tiers.py --table-gib 8
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmark"))

from tiers_report import (  # noqa: E402
    drop_page_cache,
    exposed_ratio,
    plot,
    print_table,
    resident_fraction,
    run_figures,
    table_files,
)
from tiers_workload import cache_curve, heldout_ids, served_prompts, write_datasets  # noqa: E402

from test.serving.server import generate_ids, metrics, sglang_server  # noqa: E402

CONFIGS = {"dram": None, "ssd-1/16": 1 / 16, "ssd-1/4": 1 / 4, "off": None}
CURVE_FRACTIONS = [1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2]
SEED = 1
CHECK_PROMPTS, CHECK_PROMPT_TOKENS, CHECK_NEW_TOKENS = 4, 96, 32


def build_model(table_gib: float, out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "engram.model", "build", "--random", "--engram-table-gib",
         f"{table_gib:g}", "--out", str(out), "--reuse"],
        check=True,
    )  # fmt: skip
    return out


def server_args(name: str, table_gib: float, ssd_dir: Path) -> list[str]:
    # NOTE: every config runs without the overlap schedule: only then does an ssd table
    # read the next decode step's rows as soon as a step's tokens are sampled.
    fraction = CONFIGS[name]
    if fraction is None:
        return ["--disable-overlap-schedule", "--engram-offload", name]
    return [
        "--disable-overlap-schedule", "--engram-offload", "ssd", "--engram-ssd-dir", str(ssd_dir),
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
    ]  # fmt: skip
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, check=True, timeout=args.timeout_s, stdout=log, stderr=log)
    return json.loads(result.read_text().splitlines()[-1])


def settled_metrics(url: str) -> dict[str, float]:
    time.sleep(2.5)  # NOTE: the plugin folds its counters into /metrics once a second
    return metrics(url)


def run_config(name: str, model: Path, datasets: dict, counts: dict, checks, args, work: Path):
    """Serve ``name`` once: the benchmark at every concurrency, then the greedy checks."""
    files = table_files(args.ssd_dir) if CONFIGS[name] else []
    flags = server_args(name, args.table_gib, args.ssd_dir)
    log = work / f"{name.replace('/', '_')}.server.log"
    runs, residency = {}, {}
    print(f"[{name}] starting server: {' '.join(flags)}", flush=True)
    with sglang_server(model, *flags, log=log, timeout_s=1800) as url:
        if CONFIGS[name]:
            files = table_files(args.ssd_dir)
            drop_page_cache(files)  # what the conversion (or an earlier run) left there
            residency["before"] = resident_fraction(files)
        for conc in args.concurrencies:
            before = settled_metrics(url)
            out = work / f"{name.replace('/', '_')}_c{conc}"
            result = bench(url, model, datasets[conc], conc, counts[conc], args, out)
            runs[conc] = run_figures(result, before, settled_metrics(url))
            print(f"[{name}] c={conc}: {json.dumps(runs[conc])}", flush=True)
        if CONFIGS[name]:
            residency["after"] = resident_fraction(files)
        outputs = [generate_ids(url, p, CHECK_NEW_TOKENS) for p in checks]
    return runs, residency, outputs


def ratios(results: dict, num: str, den: str, key: str) -> dict[str, float]:
    if num not in results or den not in results:
        return {}
    return {
        str(c): round(results[num][c][key] / results[den][c][key], 4)
        for c in results[num]
        if c in results[den] and results[den][c][key]
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-gib", type=float, default=8.0)
    parser.add_argument("--model", type=Path, help="default models/engram-random-<G>g")
    parser.add_argument("--ssd-dir", type=Path, help="default models/engram-random-<G>g-ssd")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--concurrencies", default="1,8,32")
    parser.add_argument("--num-prompts", type=int, default=3, help="per unit of concurrency")
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--timeout-s", type=int, default=1800)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench_serving_tiers")
    args = parser.parse_args()
    configs = args.configs.split(",")
    if unknown := set(configs) - set(CONFIGS):
        print(f"error: unknown configs {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
        return 2
    args.concurrencies = [int(c) for c in args.concurrencies.split(",")]
    stem = ROOT / "models" / f"engram-random-{args.table_gib:g}g"
    args.model = args.model or stem
    args.ssd_dir = args.ssd_dir or stem.with_name(stem.name + "-ssd")
    work = args.out
    work.mkdir(parents=True, exist_ok=True)

    model = build_model(args.table_gib, args.model)
    counts = {c: max(4, args.num_prompts * c) for c in args.concurrencies}
    datasets = write_datasets(model, work, counts, args.input_len)
    prompts = {
        c: served_prompts(datasets[c], model, counts[c], args.input_len, args.output_len, 1.0, SEED)
        for c in args.concurrencies
    }
    checks = [p[:CHECK_PROMPT_TOKENS] for p in prompts[args.concurrencies[-1]][:CHECK_PROMPTS]]

    results, residency, outputs = {}, {}, {}
    for name in configs:
        results[name], res, outputs[name] = run_config(
            name, model, datasets, counts, checks, args, work
        )
        if res:
            residency[name] = res

    print()
    print_table(results)
    summary = {
        "table_gib": args.table_gib,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "num_prompts": counts,
        "configs": {n: {str(c): r for c, r in by.items()} for n, by in results.items()},
        "page_cache_resident": residency,
        "ssd_over_dram_throughput": ratios(results, "ssd-1/16", "dram", "total_tok_s"),
        "ssd_over_dram_p90_tpot": ratios(results, "ssd-1/16", "dram", "p90_tpot_ms"),
        "ssd_quarter_over_dram_throughput": ratios(results, "ssd-1/4", "dram", "total_tok_s"),
        "dram_over_off_throughput": ratios(results, "dram", "off", "total_tok_s"),
        "dram_over_off_p90_tpot": ratios(results, "dram", "off", "p90_tpot_ms"),
    }
    if "ssd-1/16" in results:
        r = exposed_ratio(list(results["ssd-1/16"].values()))
        summary["prefetch_exposed_ratio"] = None if r is None else round(r, 4)
    if "dram" in outputs:
        summary["ssd_outputs_equal_dram"] = {
            n: sum(a == b for a, b in zip(outputs[n], outputs["dram"], strict=True)) / len(checks)
            for n in outputs
            if n.startswith("ssd")
        }
    print()
    for key in ("ssd_over_dram_throughput", "ssd_over_dram_p90_tpot", "dram_over_off_throughput"):
        print(f"{key}: {summary[key]}")
    print(f"page cache resident share of the table files: {residency}")
    print(f"greedy outputs equal to dram's: {summary.get('ssd_outputs_equal_dram')}")

    # NOTE: the curve replays every held-out piece (the served prompts are a sample of
    # them), prefill rows only: decode rows follow the random model's own outputs.
    summary["cache_curve"] = cache_curve(model, heldout_ids(model, args.input_len), CURVE_FRACTIONS)
    for p in summary["cache_curve"]["points"]:
        print(f"RAM cache {p['fraction']:.4f} of the table: hit ratio {p['hit_ratio']:.3f}")
    print(f"90 % of the hits at {summary['cache_curve']['fraction_for_90pct_of_hits']}")
    png = plot(results, work / "serving_tiers.png", f"Engram tables of {args.table_gib:g} GiB")
    summary["png"] = str(png)
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
