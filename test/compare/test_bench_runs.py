"""A sweep's benchmark runs (``compare/bench_runs.py``): each point a process forked from
one that imported ``sglang.benchmark.serving``, with the command's own exit codes, its
output in the point's log, and a kill at the point's limit that leaves nothing behind."""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path

import psutil
from sglang_engram.compare import bench_runs


def _points_alive() -> list[psutil.Process]:
    """Processes forked for points (the forkserver's children) still running."""
    found = []
    for child in psutil.Process().children():
        if "multiprocessing.forkserver" in " ".join(child.cmdline()):
            found += [p for p in child.children(recursive=True) if p.is_running()]
    return found


def test_a_point_exits_as_the_command_would_and_writes_its_log(tmp_path: Path) -> None:
    bench_runs.warm()
    log = tmp_path / "help.log"
    assert bench_runs.run_benchmark(["--help"], log, 300, {}) == 0
    assert log.read_text().startswith("usage: sglang.benchmark.serving")
    bad = f"--no-such-flag-{random.randint(0, 999)}"
    assert bench_runs.run_benchmark([bad], log, 300, {}) == 2  # argparse's usage error
    assert f"error: unrecognized arguments: {bad}" in log.read_text()


def test_a_point_past_its_limit_is_killed_and_leaves_no_process(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        argv = ["--backend", "sglang", "--host", "127.0.0.1", "--port", str(port),
                "--dataset-name", "random", "--num-prompts", "1"]  # fmt: skip
        limit = random.uniform(2, 4)
        started = time.monotonic()
        assert bench_runs.run_benchmark(argv, tmp_path / "hung.log", limit, {}) is None
        assert limit <= time.monotonic() - started < limit + 60
    assert f"127.0.0.1:{port}" in (tmp_path / "hung.log").read_text()
    deadline = time.monotonic() + 10
    while _points_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _points_alive() == []
