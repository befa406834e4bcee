"""The child process of ``bench_gather.py``: measures the cases it is given, one JSON line
each (``CASE {...}``) as soon as it is measured, so that the parent knows which case a
device fault (which ends this process) interrupted.

    python benchmark/gather_cases.py SPEC_JSON

SPEC_JSON: ``{"cases": ["uva:393216:zipf", ...], "table_gib": 8, "head_dim": 256,
"zipf": 1.1, "rep_ms": 100}``. A case is ``kind:rows:ids``; kinds:

* ``ceilings`` (rows and ids ignored): pinned host-to-device copy and device-to-device
  copy bandwidths;
* ``hbm``: ``gather_dequant`` from a table in device memory (separate weight/scale
  arrays, as the ``hbm`` placement keeps them), plain (what ``hbm`` runs) and with dedup;
* ``uva``: from the same rows packed in registered host memory on huge pages, as the
  ``dram`` placement keeps them, plain and with dedup (sort included); ``dedup_used``
  says which one ``dram`` runs at this size; bytes checked against the HBM gather;
* ``naive``: what a user would write instead: ``index_select`` of the packed rows on
  every CPU thread into pinned staging, then one host-to-device copy.

Device timings replay a CUDA graph of ``REPLAYS`` lookups with different ids (eager
launches where a capture fails), the median of ``triton.testing.do_bench``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / p) for p in ("", "sgl-kernel")]

from engram_kernels import alloc_host_buffer, gather_dequant, register_host_table  # noqa: E402
from engram_kernels.lookup import uses_dedup  # noqa: E402

from engram.files import GIB  # noqa: E402
from engram.fp8 import FP8_BLOCK, row_bytes  # noqa: E402

REPLAYS = 10  # lookups per timed graph, each with its own ids (no row stays cached)
NAIVE_REPS = 9
# NOTE: "cuda" always when run; test/kernels/test_bench_gather.py runs the cases on the
# CPU (Triton interpreter, a stand-in for ``timed``) to check everything but the timing.
DEVICE = "cuda"


def on_gpu() -> bool:
    return DEVICE != "cpu"


def sync() -> None:
    if on_gpu():
        torch.cuda.synchronize()


def emit(case: str, **fields: object) -> None:
    print("CASE " + json.dumps({"case": case, **fields}), flush=True)


def timed(fn: Callable[[torch.Tensor], object], batches: list[torch.Tensor], rep_ms: int):
    """(seconds per lookup, "graph" or "eager")."""
    import triton.testing

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for ids in batches[:2]:
            fn(ids)  # compile, load and allocate before any capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for ids in batches:
                fn(ids)
        run, how = graph.replay, "graph"
    except RuntimeError:  # a lookup that cannot be captured is timed eagerly
        torch.cuda.synchronize()

        def run() -> None:
            for ids in batches:
                fn(ids)

        how = "eager"
    ms = triton.testing.do_bench(run, warmup=10, rep=rep_ms, return_mode="median")
    return ms / 1e3 / len(batches), how


class Workload:
    """A random FP8 table on the device and the batches of row ids to look up."""

    def __init__(self, spec: dict):
        self.dim = spec["head_dim"]
        self.width = row_bytes(self.dim)
        self.rows = int(spec["table_gib"] * GIB) // self.width
        self.zipf = spec["zipf"]
        self.weight = torch.randint(0, 256, (self.rows, self.dim), dtype=torch.uint8, device=DEVICE)
        nb = self.dim // FP8_BLOCK
        self.scale = torch.randint(100, 150, (self.rows, nb), dtype=torch.uint8, device=DEVICE)
        self._packed: torch.Tensor | None = None
        self._host = None

    def ids(self, n: int, dist: str, count: int) -> list[torch.Tensor]:
        """``uniform``: distinct rows (nothing repeats); ``zipf``: n-gram ranks drawn from
        a Zipf law, each rank a random row."""
        out = []
        rng = np.random.default_rng()
        for _ in range(count):
            if dist == "uniform":
                out.append(torch.randperm(self.rows, device=DEVICE)[:n])
                continue
            ranks = np.minimum(rng.zipf(self.zipf, n) - 1, self.rows - 1)
            rows = torch.randperm(self.rows, device=DEVICE)[: int(ranks.max()) + 1]
            out.append(rows[torch.from_numpy(ranks).to(DEVICE)])
        return out

    def packed(self) -> torch.Tensor:
        """The rows packed (264 bytes for D = 256) in host memory on huge pages."""
        if self._packed is None:
            packed = alloc_host_buffer(self.rows * self.width).view(self.rows, self.width)
            chunk = 1 << 20
            for a in range(0, self.rows, chunk):
                both = torch.cat([self.weight[a : a + chunk], self.scale[a : a + chunk]], 1)
                packed[a : a + chunk].copy_(both)
            self._packed = packed
        return self._packed

    def host(self):
        """The packed rows registered for the device (what ``dram`` reads over UVA)."""
        if self._host is None:
            packed = self.packed()
            self._host = register_host_table(
                packed[:, : self.dim], packed[:, self.dim :], device=DEVICE
            )
            print(f"host table: huge pages back {self._host.coverage.fraction}", flush=True)
        return self._host


def ceilings(case: str, rep_ms: int) -> None:
    import triton.testing

    n = GIB
    src = torch.empty(n, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d2d = 2 * n / triton.testing.do_bench(lambda: dst.copy_(src), rep=rep_ms) * 1e3
    h2d = n / triton.testing.do_bench(lambda: dst.copy_(host, non_blocking=True), rep=rep_ms) * 1e3
    emit(case, d2d_gbps=d2d / 1e9, h2d_gbps=h2d / 1e9, device=torch.cuda.get_device_name())


def gathers(case: str, work: Workload, n: int, dist: str, rep_ms: int, host: bool) -> None:
    batches = work.ids(n, dist, REPLAYS)
    unique = torch.unique(batches[0]).numel() / n
    out = torch.empty(n, work.dim, dtype=torch.bfloat16, device=DEVICE)
    if host:
        table = work.host()
        w, s = table.weight, table.scale
    else:
        w, s = work.weight, work.scale
    us = {}
    for dedup in (False, True):
        sec, how = timed(
            lambda ids, d=dedup: gather_dequant(w, s, ids, dedup=d, out=out), batches, rep_ms
        )
        us["dedup" if dedup else "plain"] = sec * 1e6
    used = uses_dedup(w, n)
    fields = {
        "us": us["dedup" if used else "plain"],
        "us_plain": us["plain"],
        "us_dedup": us["dedup"],
    }
    if host:  # the bytes the dram placement gives against the HBM gather's
        got = gather_dequant(w, s, batches[0], dedup=used)
        want = gather_dequant(work.weight, work.scale, batches[0])
        fields["equal"] = bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
    emit(case, dedup_used=used, unique_ratio=unique, timing=how, **fields)


def naive(case: str, work: Workload, n: int, dist: str) -> None:
    """``index_select`` on every CPU thread into pinned staging + one copy, synchronised."""
    torch.set_num_threads(os.cpu_count() or 1)
    packed = work.packed()
    stage = torch.empty(n, work.width, dtype=torch.uint8, pin_memory=on_gpu())
    dev = torch.empty(n, work.width, dtype=torch.uint8, device=DEVICE)
    batches = [ids.cpu() for ids in work.ids(n, dist, NAIVE_REPS)]
    times = []
    for ids in batches:
        start = time.perf_counter()
        torch.index_select(packed, 0, ids, out=stage)
        dev.copy_(stage, non_blocking=True)
        sync()
        times.append(time.perf_counter() - start)
    emit(case, us=sorted(times)[len(times) // 2] * 1e6, threads=torch.get_num_threads())


def main(spec: dict) -> None:
    work = None
    for case in spec["cases"]:
        kind, rows, dist = case.split(":")
        if kind == "ceilings":
            ceilings(case, spec["rep_ms"])
            continue
        work = work or Workload(spec)
        if kind == "naive":
            naive(case, work, int(rows), dist)
        else:
            gathers(case, work, int(rows), dist, spec["rep_ms"], host=kind == "uva")
    if work is not None and work._host is not None:
        work._host.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
