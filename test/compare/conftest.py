"""Fixtures of the comparison-run tests: the tiny model's tokenizer as a model folder
(the benchmark's --tokenizer, offline), the sweeps' environment and stand-in servers
(fixed timing; real servers are started by the sweeps themselves)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

STANDIN = Path(__file__).with_name("standin_server.py")


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from engram.model.tokenizer import asset_bytes, tokenizer_config

    path = tmp_path_factory.mktemp("tiny-tokenizer")
    (path / "tokenizer.json").write_bytes(asset_bytes())
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(8192)))
    return path


@pytest.fixture
def offline_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment sweeps run in: no hub access, one OpenMP thread, our tree first
    on the path."""
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(root), str(root / "sgl-kernel"), str(root / "python")])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # NOTE: one OpenMP thread per server: two, bound to both cores of a busy 2-core
    # machine, make each decode step wait for whatever else runs (10-20x slower).
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", path + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return dict(os.environ)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def standin() -> Iterator[Callable[..., str]]:
    """Start stand-in servers (``standin(ttft_ms=.., itl_ms=..)`` -> URL) with a fixed
    inter-token delay; all stop after."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*extra: str, **opts: float) -> str:
        port = free_port()
        argv = [sys.executable, str(STANDIN), "--port", str(port), "--enable-metrics", *extra]
        for key, value in opts.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        procs.append(subprocess.Popen(argv))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(url + "/health", timeout=2).ok:
                    return url
            except requests.RequestException:
                time.sleep(0.2)
        raise AssertionError("stand-in server did not start")

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
