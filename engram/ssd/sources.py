"""Where the rows written to an SSD table come from.

A :class:`RowSource` hands out FP8 rows by range (so a 94 GiB table is streamed, never
held whole) and says who it is: ``identity()`` is what the manifest of a table written
from it records, and what :func:`engram.ssd.ensure.decide` compares to tell "same rows,
reuse or resume" from "other rows, convert again".
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

import numpy as np
import torch

from engram.fp8 import as_uint8

SAMPLE_ROWS = 1024


class RowSource(Protocol):
    num_rows: int
    head_dim: int

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """uint8 rows ``[stop - start, D]`` and their scales ``[stop - start, D/32]``."""
        ...

    def identity(self) -> dict[str, Any]:
        """JSON-able facts that differ between different sources of rows."""
        ...


def sample_crc(source: RowSource) -> int:
    """crc32 of a fixed spread of rows (first, last and evenly spaced ones).

    NOTE: part of every source's identity: the rule that decides reuse (see
    :mod:`engram.ssd.ensure`). The manifest's per-chunk crcs cover every byte, for
    ``verify="full"``.
    """
    n = source.num_rows
    picks = np.unique(np.linspace(0, n - 1, num=min(n, SAMPLE_ROWS)).astype(np.int64))
    crc = 0
    for row in picks.tolist():
        weight, scale = source.read(row, row + 1)
        crc = zlib.crc32(weight.tobytes(), crc)
        crc = zlib.crc32(scale.tobytes(), crc)
    return crc


class TensorRows:
    """Rows of an in-memory (weight, scale) pair, e.g. what the model loader holds."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor):
        self._weight = as_uint8(weight).cpu()
        self._scale = as_uint8(scale).cpu()
        self.num_rows, self.head_dim = (int(d) for d in self._weight.shape)
        self._identity: dict[str, Any] | None = None

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        return self._weight[start:stop].numpy(), self._scale[start:stop].numpy()

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            self._identity = {
                "kind": "tensors",
                "rows": self.num_rows,
                "head_dim": self.head_dim,
                "sample_crc32": sample_crc(self),
            }
        return self._identity
