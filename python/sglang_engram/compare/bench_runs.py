"""The serving benchmark's runs of a sweep: each point in a process of its own, forked
from one process that imported ``sglang.benchmark.serving`` once.

A fresh ``python -m sglang.benchmark.serving`` spends 15-50 s importing SGLang's runtime
before it sends a request (a busy 2-core machine: longer than a small point's run). Here
a forkserver (``multiprocessing``) imports it while the first deployment starts, and each
point is a fork of it: its own process, session, log and exit code, killed at its limit,
the benchmark's own command line (``cli_main``) reading the point's arguments.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from multiprocessing import forkserver
from pathlib import Path

from sglang_engram.compare.workloads import BENCH_MODULE

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["sglang_engram.compare.bench_preload"])


def warm() -> None:
    """Start the forkserver (and its import of the benchmark) now, in the background."""
    forkserver.ensure_running()


def _point(argv: list[str], log: str, env: dict[str, str]) -> None:
    os.setsid()  # NOTE: its own session, so that a kill at its limit takes what it started
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(env)
    sys.argv = [BENCH_MODULE, *argv]
    from sglang.benchmark import serving

    serving.cli_main()


def run_benchmark(argv: list[str], log: Path, timeout_s: float, env: dict[str, str]) -> int | None:
    """``python -m sglang.benchmark.serving *argv`` with ``env`` added, its output in
    ``log``: its exit code, or None once ``timeout_s`` have passed (it is then killed)."""
    proc = _CONTEXT.Process(target=_point, args=(argv, str(log), env), daemon=True)
    proc.start()
    try:
        proc.join(timeout_s)
        return None if proc.is_alive() else proc.exitcode
    finally:
        if proc.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.join()
