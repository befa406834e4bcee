"""The runs of ``bench_serving_tiers.py``: one ``sglang.benchmark.serving`` run of one
config, and every config's runs, repeats interleaved (the order rotated each repeat)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engram_testing.client import settled_metrics
from engram_testing.tiers.report import run_figures, server_cpu_seconds
from engram_testing.tiers.servers import CONFIGS, slug

SEED = 1  # sglang.benchmark.serving's sampler seed


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
