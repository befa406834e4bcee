"""The runs of ``bench_serving_tiers.py``: one ``sglang.benchmark.serving`` run of one
config, and every config's runs, repeats interleaved (the order rotated each repeat)."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from pathlib import Path

from engram_testing.client import settled_metrics
from engram_testing.tiers.report import run_figures, server_cpu_seconds
from engram_testing.tiers.servers import CONFIGS, slug

SEED = 1  # sglang.benchmark.serving's sampler seed


def serving_benchmark(argv: list[str], log: Path, timeout_s: float) -> None:
    """``python -m sglang.benchmark.serving *argv``, run in this process, its output in
    ``log``; fails as that command would, or once ``timeout_s`` have passed.

    NOTE: in-process because the module's imports (SGLang's runtime, a tokenizer) cost a
    fresh interpreter 25-50 s on a busy 2-core machine, many times a small point's run;
    its own command line (``cli_main``, which reads ``sys.argv``) keeps every default and
    check of the command. It runs in a thread of its own so that the limit holds."""
    failed: list[BaseException] = []

    def body() -> None:
        try:
            serving.cli_main()
        except SystemExit as exc:  # NOTE: its errors end in sys.exit(1)
            if exc.code not in (0, None):
                failed.append(exc)
        except BaseException as exc:
            failed.append(exc)

    saved = sys.argv
    sys.argv = ["sglang.benchmark.serving", *argv]
    try:
        with (
            open(log, "w") as out,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(out),
        ):
            # NOTE: imported here, in the main thread, its import warnings into the log
            from sglang.benchmark import serving

            worker = threading.Thread(target=body, daemon=True)
            worker.start()
            worker.join(timeout_s)
    finally:
        sys.argv = saved
    if worker.is_alive():
        raise TimeoutError(f"sglang.benchmark.serving ran past {timeout_s} s: {log}")
    if failed:
        raise RuntimeError(f"sglang.benchmark.serving failed ({failed[0]!r}): {log}")


def bench(url: str, model: Path, dataset: Path, conc: int, n: int, args, out: Path) -> dict:
    """One ``sglang.benchmark.serving`` run; its result record."""
    result = out.with_suffix(".jsonl")
    result.unlink(missing_ok=True)
    argv = [
        "--backend", "sglang",
        "--base-url", url, "--model", str(model), "--tokenizer", str(model),
        "--dataset-name", "random", "--dataset-path", str(dataset), "--tokenize-prompt",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--random-range-ratio", "1.0", "--num-prompts", str(n), "--max-concurrency", str(conc),
        "--seed", str(SEED), "--disable-tqdm", "--output-file", str(result),
        "--flush-cache",  # NOTE: a replay's prefill is computed again, not a prefix hit
    ]  # fmt: skip
    serving_benchmark(argv, out.with_suffix(".log"), args.timeout_s)
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
