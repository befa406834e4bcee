"""``sweep``: every config x concurrency point through SGLang's serving benchmark.

Per config: start the deployment, then for each concurrency scrape the Engram counters,
run ``python -m sglang.benchmark.serving`` (its own ``--output-file`` and log kept under
``DIR/raw/``; in a process forked from one that imported it once: :mod:`.bench_runs`),
scrape again and append one line to ``DIR/results.jsonl``. A point that
fails is recorded as failed and the sweep goes on (a dead server is restarted for the
next point); a config that cannot start is one line, recorded nowhere, so ``--resume``
tries it again. Ctrl-C or SIGTERM stops the benchmark and every server started here.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram.files import atomic_write
from sglang_engram.compare import bench_runs, facts
from sglang_engram.compare.deployments import (
    Deployment,
    DeploymentError,
    Target,
    make_deployment,
)
from sglang_engram.compare.point_counters import point_counters, summed_counters
from sglang_engram.compare.results import (
    RESULTS,
    append_result,
    drop_torn_tail,
    point_key,
    read_results,
)
from sglang_engram.compare.resume import SPEC, check_resume, spec_record, start_over
from sglang_engram.compare.spec import ConfigSpec, SweepSpec
from sglang_engram.compare.workloads import bench_args, expected_requests

Say = Callable[[str], None]
# Kept in the raw output only: the server's own report and the per-request details.
RAW_ONLY = {
    "server_info",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "generated_texts",
    "errors",
}


class SweepError(RuntimeError):
    pass


class Progress:
    """One line per point: what it measured, how long it took, and the ETA."""

    def __init__(self, total: int, say: Say):
        self.total, self.say, self.walls = total, say, []

    def point(self, row: dict[str, Any]) -> None:
        self.walls.append(row["wall_s"])
        left = self.total - len(self.walls)
        eta = _duration(left * sum(self.walls) / len(self.walls))
        head = f"[{len(self.walls)}/{self.total}] {row['config']} C={row['max_concurrency']}"
        if row["status"] == "ok":
            what = (
                f"{row['total_throughput']:.0f} tok/s, P90 TPOT {row['p90_tpot_ms']:.1f} ms, "
                f"P90 TTFT {row['p90_ttft_ms']:.0f} ms"
            )
        else:
            what = f"FAILED: {row['error']}"
        self.say(f"{head}: {what} ({row['wall_s']:.0f} s; ETA {eta})")

    def skip(self, n: int) -> None:
        self.total -= n


def run_sweep(
    spec: SweepSpec,
    out: Path,
    *,
    resume: bool = False,
    force_new: bool = False,
    say: Say = print,
) -> int:
    """Run every pending point; returns how many failed or could not start."""
    out.mkdir(parents=True, exist_ok=True)
    results = out / RESULTS
    done: set[tuple[str, int]] = set()
    if force_new:
        if aside := start_over(out):
            say(f"starting over: the previous run is now in {aside}")
    elif results.exists() and results.stat().st_size:
        if not resume:
            raise SweepError(
                f"{results} already holds points: pass --resume to continue it, --force-new "
                "to start over, or choose another --out"
            )
        if drop_torn_tail(results):
            say(f"{results}: dropped a last line cut short by a kill")
        rows = read_results(results)
        check_resume(out, spec, rows)
        done = {point_key(r) for r in rows}
    # NOTE: written only once the points already there are known to be this spec's.
    atomic_write(out / SPEC, spec_record(spec))
    pending = [
        (cfg, c)
        for cfg in spec.configs
        for c in sorted(spec.concurrency)
        if (cfg.name, c) not in done
    ]
    if done:
        say(f"resuming: {len(done)} points already recorded, {len(pending)} to run")
    context = {"software": facts.software(), "host": facts.host()}
    progress = Progress(len(pending), say)
    if pending:
        bench_runs.warm()  # NOTE: its import of the benchmark overlaps the first start
    failures = 0
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        for cfg in spec.configs:
            points = [c for conf, c in pending if conf is cfg]
            if points:
                failures += _run_config(spec, cfg, points, out, context, progress, say)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return failures


def _run_config(
    spec: SweepSpec,
    cfg: ConfigSpec,
    points: list[int],
    out: Path,
    context: dict[str, Any],
    progress: Progress,
    say: Say,
) -> int:
    deployment = make_deployment(cfg, spec, out)
    target: Target | None = None
    failures = 0
    try:
        for i, c in enumerate(points):
            if target is None:
                say(f"starting {cfg.name} ({cfg.kind})")
                try:
                    target = deployment.start()
                    hardware = _hardware(spec, target)
                except (DeploymentError, facts.UnknownGpu) as exc:
                    deployment.stop()
                    say(
                        f"error: {exc}"
                        if cfg.name in str(exc)
                        else f"error: config {cfg.name}: {exc}"
                    )
                    progress.skip(len(points) - i)
                    return failures + len(points) - i
            row = run_point(spec, cfg, target, hardware, c, out, deployment)
            row.update(context)
            append_result(out / RESULTS, row)
            progress.point(row)
            if row["status"] != "ok":
                failures += 1
            if deployment.dead():
                deployment.stop()
                target = None
    finally:
        deployment.stop()
    return failures


def run_point(
    spec: SweepSpec,
    cfg: ConfigSpec,
    target: Target,
    hardware: facts.Hardware,
    concurrency: int,
    out: Path,
    deployment: Deployment,
) -> dict[str, Any]:
    raw = out / "raw"
    raw.mkdir(exist_ok=True)
    stem = f"{cfg.name}_c{concurrency}"
    output, log = raw / f"{stem}.jsonl", raw / f"{stem}.log"
    output.unlink(missing_ok=True)  # NOTE: the benchmark appends; a killed try may be there
    started = time.monotonic()
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    load = os.getloadavg()[0]  # NOTE: a shared machine's other work shows up here
    before = summed_counters(target.metrics_urls)
    argv = bench_args(spec, target.url, concurrency, str(output))
    key = {"OPENAI_API_KEY": target.key} if target.key else {}  # NOTE: what it sends
    rc = bench_runs.run_benchmark(argv, log, spec.point_timeout_s, key)
    after = summed_counters(target.metrics_urls)
    summary = _summary(output)
    expected = expected_requests(spec, concurrency)
    error = None
    if rc is None:
        error = f"benchmark timed out after {spec.point_timeout_s:.0f} s"
    elif rc != 0:
        error = f"benchmark exited with code {rc}: {_error_line(log)}"
    elif summary is None:
        error = "benchmark wrote no result"
    elif summary.get("completed", 0) < expected:
        first = next((e for e in summary.get("errors", []) if e), "")
        error = f"completed {summary.get('completed', 0)} of {expected} requests"
        error += f"; first error: {first.strip().splitlines()[-1][:200]}" if first else ""
    dead = deployment.dead()
    if error and dead:
        error = f"server died ({dead}); {error}"
    row = {k: v for k, v in (summary or {}).items() if k not in RAW_ONLY}
    row.update(
        sweep=spec.name,
        config=cfg.name,
        kind=cfg.kind,
        status="failed" if error else "ok",
        error=error,
        placement=target.placement,
        **hardware.as_row(),
        max_concurrency=concurrency,
        num_prompts=expected,
        workload=spec.workload.describe(),
        model=spec.model,
        url=target.url,
        started_at=when,
        wall_s=round(time.monotonic() - started, 3),
        load_avg_1m=round(load, 2),
        raw={"output": str(output.relative_to(out)), "log": str(log.relative_to(out))},
        engram=point_counters(
            before, after, float((summary or {}).get("total_output_tokens", 0)), target.placement
        ),
    )
    return row


def _hardware(spec: SweepSpec, target: Target) -> facts.Hardware:
    override = target.sku or spec.sku
    if spec.device == "cpu":
        return facts.cpu_hardware(override, target.hosts, local=target.local)
    return facts.gpu_hardware(override, target.num_gpus)


def _summary(output: Path) -> dict[str, Any] | None:
    try:
        lines = output.read_text().splitlines()
    except OSError:
        return None
    return json.loads(lines[-1]) if lines else None


def _error_line(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return ((errors or lines or ["no output"])[-1])[:300]


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s")
    )
