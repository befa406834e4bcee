"""Start and stop real SGLang servers (``python -m sglang.launch_server``) for the tests
and the serving benchmarks: on a GPU as users run them, on this CPU through SGLang's CPU
engine (``SGLANG_USE_CPU_ENGINE=1 --device cpu``, the plugin's ``sgl_kernel`` stand-in)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from sglang_engram.integration.kernel_standin import gpu_present

# NOTE: SGLang's CPU engine sizes the KV pool at ~72 % of free host memory (15 GB
# here, 30 s to allocate); the tests' prompts need a sliver of that, and several
# servers share this machine.
CPU_KV_TOKENS = 32768


# NOTE: PD tests move the KV cache with mooncake, its TCP transport forced: this machine
# has no RDMA device.
TRANSFER = ("--disaggregation-transfer-backend", "mooncake_tcp")


PORT_ATTEMPTS = 3  # a server's tries at a free port (another process may bind it first)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_tiny_model(out: Path) -> Path:
    """The bundled trained tiny Engram model (``python -m engram.model build``; a
    current build in ``out`` is reused)."""
    subprocess.run(
        [sys.executable, "-m", "engram.model", "build", "--out", str(out), "--reuse"],
        check=True,
        timeout=600,
    )
    return out


def device_args() -> list[str]:
    """What a server needs on this machine: nothing on a GPU, the CPU engine without
    (and ``--sleep-on-idle``: an idle CPU scheduler spins a core, which on a 2-core
    machine slows every other server and test)."""
    if gpu_present():
        return []
    return ["--device", "cpu", "--max-total-tokens", str(CPU_KV_TOKENS), "--sleep-on-idle"]


def server_env() -> dict[str, str]:
    env = os.environ.copy()
    if not gpu_present():
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        # NOTE: one OpenMP thread per server: with two bound to both cores of a 2-core
        # machine, a decode step waits on whatever else runs (other servers of the same
        # test, the router), 10-20x slower and erratic.
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def launch_command(model: Path, port: int, *args: str) -> list[str]:
    return [
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
        *device_args(),
        *args,
    ]


def log_excerpt(log: Path, n_errors: int = 12, tail: int = 2000) -> str:
    """A server log's first error lines (a bind failure, an exception's last line) and its
    tail: a warmup that gives up prints a long traceback that would otherwise hide the
    cause further up."""
    text = log.read_text(errors="replace")
    errors = [line for line in text.splitlines() if re.search(r"Errno|ERROR|Error:", line)]
    return "first error lines:\n" + "\n".join(errors[:n_errors]) + f"\n...\n{text[-tail:]}"


class PortTaken(RuntimeError):
    """Another process bound the server's port between ``free_port`` and the server."""


def wait_healthy(
    url: str, proc: subprocess.Popen, log: Path, timeout_s: float, path: str = "/health"
) -> None:
    deadline = time.monotonic() + timeout_s
    taken = f"{url.rsplit(':', 1)[1]}): address already in use"
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}): {log_excerpt(log)}")
        # NOTE: the server then warms up against whatever holds the port and gives up only
        # after minutes (it cost a test module 12 min once, five servers starting at once).
        if taken in log.read_text(errors="replace"):
            raise PortTaken(f"{url}: the port was taken before the server bound it: {log}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{url}{path}", timeout=5) as r:
                if r.status == 200:
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"server not ready after {timeout_s}s: {log}")
        time.sleep(2)


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def sglang_server(
    model: Path, *args: str, log: Path, timeout_s: float = 600, port: int | None = None
) -> Iterator[str]:
    """``python -m sglang.launch_server`` on a free port (another one if the port is
    taken before the server binds it, unless ``port`` was given); yields its base URL."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        chosen = port or free_port()
        with open(log, "w") as out:
            proc = subprocess.Popen(
                launch_command(model, chosen, *args),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=server_env(),
            )
        url = f"http://127.0.0.1:{chosen}"
        try:
            wait_healthy(url, proc, log, timeout_s)
            break
        except PortTaken:
            stop(proc)
            if port is not None or attempt == PORT_ATTEMPTS:
                raise
        except BaseException:
            stop(proc)
            raise
    try:
        yield url
    finally:
        stop(proc)


def router_command(port: int, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sglang_router.launch_router",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warn",
        # NOTE: every router's Prometheus exporter binds port 29000 unless told otherwise
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(free_port()),
        *args,
    ]


@contextlib.contextmanager
def sglang_router(*args: str, log: Path, timeout_s: float = 300) -> Iterator[str]:
    """``python -m sglang_router.launch_router`` (the real sglang-router) on a free port with
    ``args`` (e.g. ``--pd-disaggregation --prefill URL BOOTSTRAP --decode URL``); yields its
    base URL once its ``/readiness`` answers 200 (its workers are healthy; ``/health`` only
    says the router is up)."""
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            router_command(port, *args),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, log, timeout_s, path="/readiness")
        yield url
    finally:
        stop(proc)
