"""Start and stop a real SGLang server (GPU tests and the serving benchmark)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_tiny_model(out: Path) -> Path:
    """The core library's tiny Engram model (``python -m engram.model build``; a
    current build in ``out`` is reused)."""
    subprocess.run(
        [sys.executable, "-m", "engram.model", "build", "--out", str(out), "--reuse"],
        check=True,
        timeout=600,
    )
    return out


@contextlib.contextmanager
def sglang_server(model: Path, *args: str, log: Path, timeout_s: float = 600) -> Iterator[str]:
    """``python -m sglang.launch_server`` on a free port; yields its base URL."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--enable-metrics",
        *args,
    ]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy()
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited ({proc.returncode}): {log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready after {timeout_s}s: {log}")
            time.sleep(2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def generate(url: str, prompts: list[str], max_new_tokens: int = 32) -> list[str]:
    """Greedy completions, one request at a time.

    NOTE: the tiny model's bf16 logits tie often enough that a different batching (and
    so a different reduction order) can flip a greedy token; one request at a time
    batches the same way on every server, so outputs compare exactly.
    """
    out = []
    for prompt in prompts:
        body = {
            "text": prompt,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens},
        }
        req = urllib.request.Request(
            f"{url}/generate",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=300) as r:
            out.append(json.loads(r.read())["text"])
    return out


def metrics_after(url: str, before: dict[str, float], name: str, timeout_s: float = 10) -> dict:
    """/metrics once ``name`` has grown past ``before`` (the plugin folds its counters
    in once a second), or as it is at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = metrics(url)
        if now.get(name, 0) > before.get(name, 0) or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def metrics(url: str) -> dict[str, float]:
    """``sglang:engram_*`` samples of /metrics (``..._total``, ``..._count``, ...), summed
    over labels."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("sglang:engram_"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out
