"""The synthetic table and Zipf workload ``bench_lookup.py`` measures on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engram.files import GIB, MIB
from engram.row_formats import E4m3Ue8m0Rows
from engram.ssd.ensure import ensure_table
from engram.ssd.layout import DiskLayout

COLUMNS = 48  # hash columns: rows looked up per token


class SyntheticRows:
    """Random valid FP8 rows (no NaN bytes), generated chunk by chunk."""

    def __init__(self, num_rows: int, head_dim: int = 256):
        self.num_rows, self.head_dim = num_rows, head_dim
        self.row_format = E4m3Ue8m0Rows(head_dim)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Packed rows ``[stop - start, row_bytes]`` (the ``RowSource`` contract)."""
        rng = np.random.default_rng(start)
        rows = stop - start
        # Clearing bit 3 keeps the e4m3 exponent below 15, so no byte is a NaN.
        weight = np.frombuffer(rng.bytes(rows * self.head_dim), dtype=np.uint8) & 0xF7
        scale = (np.frombuffer(rng.bytes(rows * self.head_dim // 32), dtype=np.uint8) & 7) + 124
        return self.row_format.pack(
            torch.from_numpy(weight.reshape(rows, -1)), torch.from_numpy(scale.reshape(rows, -1))
        )

    def identity(self) -> dict[str, Any]:
        return {"kind": "synthetic", "rows": self.num_rows, "head_dim": self.head_dim}


def build_table(directory: Path, gib: float) -> Path:
    probe = DiskLayout(1, 256)
    rows = int(gib * GIB) // probe.block_bytes * probe.rows_per_block
    source = SyntheticRows(rows)
    final = directory / "table"
    start = time.perf_counter()
    ensure_table(final, source, chunk_bytes=16 * MIB)
    print(f"built a {gib:g} GiB table ({rows:,} rows) in {time.perf_counter() - start:.1f} s")
    return final


def zipf_batches(
    num_rows: int, tokens: int, count: int, a: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """``count`` batches of ``tokens x 48`` row ids from Zipf-distributed n-grams, drawn
    from ``rng`` (one seed: the same ids in every run, so two runs compare like with like)."""
    span = num_rows // COLUMNS
    cols = np.arange(COLUMNS, dtype=np.uint64)
    mult = rng.integers(1, 1 << 62, COLUMNS, dtype=np.uint64) | np.uint64(1)
    out = []
    for _ in range(count):
        ngrams = rng.zipf(a, (tokens, COLUMNS)).astype(np.uint64)
        with np.errstate(over="ignore"):
            mixed = (ngrams * mult + cols * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(3)
        out.append(((mixed % np.uint64(span)) + cols * np.uint64(span)).astype(np.int64).ravel())
    return out
