"""Memory of a server's whole process tree, for ``qwen4_ssd_rss``'s sampler: RSS and
its anonymous part summed over the launcher and every process under it, and at each new
peak which mappings hold it, per process name and file."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

from engram.files import GIB

ATTRIBUTE_STEP = 128 << 20  # NOTE: RSS growth between two reads of every process's mappings


class TreeMemory:
    """RSS and anonymous RSS of the server launched with ``--port port`` and every process
    under it (found by its command line, from before it starts listening); at each new
    peak (``ATTRIBUTE_STEP`` above the last), which mappings hold its RSS."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.root: psutil.Process | None = None
        self.attributed_at = 0
        self.mappings_at_peak: dict[str, float] = {}

    def __call__(self) -> dict[str, float]:
        if self.root is None:
            self.root = self._find()
            if self.root is None:
                return {}
        procs = [self.root, *self.root.children(recursive=True)]
        rss = anon = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                m = p.memory_info()
                rss, anon = rss + m.rss, anon + m.rss - m.shared
        if rss > self.attributed_at + ATTRIBUTE_STEP:
            self.attributed_at, self.mappings_at_peak = rss, _largest_mappings(procs)
        return {"rss": rss, "anon": anon}

    def _find(self) -> psutil.Process | None:
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if "sglang.launch_server" in cmd and str(self.port) in cmd:
                return p
        return None


def _largest_mappings(procs: list[psutil.Process], top: int = 6) -> dict[str, float]:
    """GiB of RSS per process name and mapped file (anonymous memory as ``[anon]``)."""
    held: dict[str, int] = {}
    for p in procs:
        with contextlib.suppress(psutil.Error):
            name = p.name()
            for m in p.memory_maps():
                key = f"{name} {m.path if m.path.startswith('/') else '[anon]'}"
                held[key] = held.get(key, 0) + m.rss
    largest = sorted(held.items(), key=lambda kv: -kv[1])[:top]
    return {key: round(rss / GIB, 3) for key, rss in largest}


def short_key(key: str) -> str:
    """``process /dir/file`` as ``process file``."""
    name, _, path = key.partition(" ")
    return f"{name} {Path(path).name}"
