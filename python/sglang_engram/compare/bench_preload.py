"""What a sweep's forkserver imports before it forks the points
(:mod:`sglang_engram.compare.bench_runs`): the serving benchmark, its import-time warnings
kept out of the sweep's terminal. A failed import costs nothing but time: each point's
process imports it again, and says why in its own log."""

from __future__ import annotations

import contextlib
import os

from sglang_engram.compare.workloads import BENCH_MODULE


def _import_quietly() -> None:
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        with contextlib.suppress(Exception):
            __import__(BENCH_MODULE)
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


_import_quietly()
