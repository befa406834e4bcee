"""Helpers of the cluster tests: specs from the examples, free ports, waiting, process
liveness."""

from __future__ import annotations

import os
import random
import socket
import string
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil
import yaml
from sglang_engram.cluster.ports import ephemeral_range

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

T = TypeVar("T")


def spec_from_example(example: str, tmp: Path, model: Path, **changes: Any) -> tuple[Path, int]:
    """The example spec with a fresh name, ``model`` and a block of free ports (other
    tests and servers run on this machine); returns the file and the router's port."""
    base = free_block(5)
    data = yaml.safe_load((EXAMPLES / example).read_text())
    name = "t" + "".join(random.choices(string.ascii_lowercase, k=6))
    data.update(name=name, model=str(model), base_port=base + 2, bootstrap_base_port=base + 4)
    data["router"].update(port=base, prometheus_port=base + 1)
    data.update(changes)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, base


def cluster_env(home: Path) -> dict[str, str]:
    """The environment of the cluster commands: state under ``home``, no inherited Ray."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["SGLANG_ENGRAM_CLUSTER_HOME"] = str(home)
    return env


def start_up(
    spec: Path, home: Path, *args: str, host: Any = None, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``cluster up SPEC`` in the background (output piped, text), with its state under
    ``home`` and a local Ray unless ``args`` give ``--address``; in ``host`` (a
    ``netns_hosts.Host``) if given, with ``env`` on top of the commands' environment."""
    argv = [sys.executable, "-m", "sglang_engram.cluster", "up", str(spec), *args]
    popen = subprocess.Popen if host is None else host.popen
    kw = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return popen(argv, **kw, env={**cluster_env(home), **(env or {})})


def follow(up: subprocess.Popen) -> tuple[list[str], threading.Thread]:
    """``up``'s output lines as they come (the list grows), and the thread reading them."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(up.stdout), daemon=True)
    reader.start()
    return lines, reader


def wait_ready(up: subprocess.Popen, lines: list[str], timeout_s: float) -> None:
    """Until ``up`` says ready; it must still run."""
    wait_for(
        lambda: any(x.startswith("ready: ") for x in lines) or up.poll() is not None,
        timeout_s,
        "up to report ready",
    )
    assert up.poll() is None, "".join(lines)


def free_block(n: int) -> int:
    """A run of n consecutive free TCP ports below the kernel's ephemeral range.

    NOTE: a port in that range can be taken by any outgoing connection (Ray's, the KV
    transfer's) between this check and the moment its server binds it (CI: a decode
    worker's port, taken while its model loaded)."""
    span = ephemeral_range()
    top = min(32768 if span is None else span.start, 45000) - n
    for _ in range(200):
        base = random.randint(20000, top)
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port block")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(cond: Callable[[], T], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)
