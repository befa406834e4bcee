"""Helpers of the cluster tests: free ports, waiting, process liveness."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from typing import TypeVar

import psutil

T = TypeVar("T")


def free_block(n: int) -> int:
    """A run of n consecutive free TCP ports."""
    for _ in range(200):
        base = random.randint(20000, 45000)
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
