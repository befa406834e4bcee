"""How many random reads per second this machine's disk serves: the ceiling of the ``ssd``
placement's first reads.

Reads random blocks of a file with ``O_DIRECT`` (the page cache out of play) through the
same kernel AIO the ``direct`` reader uses, at each queue depth for a few seconds, and
prints reads/s and MiB/s per depth, then a last line of JSON. An Engram row read cold
costs about one block read (rows are a few hundred bytes and their ids hashes, so two
rows of one lookup rarely share a block), so reads/s at the reader's depth sets the pace
of a cold ``ssd`` lookup; ``bench_serving_tiers`` runs this probe around its servers to
say what the disk gave while they ran.

    python benchmark/disk_probe.py --file models/engram-random-8g-ssd/<table>/rows.bin
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import time
from pathlib import Path

import numpy as np

from engram.ssd.aio import AioContext

DEPTHS = [1, 8, 64, 512]


def random_reads_per_s(path: Path, depth: int, seconds: float, block_bytes: int = 4096) -> float:
    """Random ``block_bytes`` reads per second from ``path``, ``depth`` in flight."""
    blocks = os.path.getsize(path) // block_bytes
    if blocks < 1:
        raise ValueError(f"{path} is smaller than one {block_bytes}-byte block")
    rng = np.random.default_rng()
    buffer = mmap.mmap(-1, depth * block_bytes)  # page-aligned, as O_DIRECT needs
    base = np.frombuffer(buffer, dtype=np.uint8).ctypes.data
    runs = np.zeros((depth, 3), dtype=np.int64)
    runs[:, 1] = 1
    runs[:, 2] = np.arange(depth)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    aio = AioContext(depth)
    try:
        reads, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            runs[:, 0] = rng.integers(0, blocks, depth)
            results = aio.read_runs(fd, base, runs, block_bytes)
            if (results < 0).any():
                err = -int(results[results < 0][0])
                raise OSError(err, f"reading {path}: {os.strerror(err)}")
            reads += depth
        return reads / elapsed
    finally:
        aio.close()
        os.close(fd)
        buffer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, required=True, help="a large file on the disk")
    parser.add_argument("--depths", default=",".join(map(str, DEPTHS)), help="queue depths")
    parser.add_argument("--seconds", type=float, default=3.0, help="per depth")
    parser.add_argument("--block-kib", type=int, default=4)
    args = parser.parse_args()
    if not args.file.is_file():
        print(f"error: --file {args.file} is not a file", file=sys.stderr)
        return 2
    try:
        depths = [int(d) for d in args.depths.split(",")]
    except ValueError:
        depths = []
    if not depths or min(depths) < 1:
        print(f"error: --depths must be positive integers, not {args.depths!r}", file=sys.stderr)
        return 2
    block = args.block_kib << 10
    figures = {}
    for depth in depths:
        rate = random_reads_per_s(args.file, depth, args.seconds, block)
        figures[depth] = rate
        print(f"depth {depth:4d}: {rate:10,.0f} reads/s {rate * block / 2**20:8.1f} MiB/s")
    print(json.dumps({"file": str(args.file), "block_bytes": block, "reads_per_s": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
