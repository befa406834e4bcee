"""Where the rows written to an SSD table come from.

A :class:`RowSource` hands out packed rows by range (so a 94 GiB table is streamed,
never held whole), in its ``row_format`` (:mod:`engram.row_formats`), and says who it
is: ``identity()`` is what the manifest of a table written from it records, and what
:func:`engram.ssd.ensure.decide` compares to tell "same rows, reuse or resume" from
"other rows, convert again".
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

import numpy as np
import torch

from engram.errors import EngramTableError
from engram.row_formats import DEFAULT_ROW_FORMAT, E4m3Ue8m0Rows, RowFormat
from engram.ssd.layout import DiskLayout

SAMPLE_ROWS = 1024


class RowSource(Protocol):
    num_rows: int
    head_dim: int
    row_format: RowFormat

    def read(self, start: int, stop: int) -> np.ndarray:
        """Packed uint8 rows ``[stop - start, row_format.row_bytes]``."""
        ...

    def identity(self) -> dict[str, Any]:
        """JSON-able facts that differ between different sources of rows."""
        ...


def describe_source(source: RowSource) -> str:
    """What ``source``'s rows are, for a log line: its own ``describe()`` where it has
    one (a checkpoint's: the layer and the checkpoint), else its row count."""
    describe = getattr(source, "describe", None)
    return describe() if describe is not None else f"a table of {source.num_rows:,} rows"


def source_layout(source: RowSource, chunk_bytes: int) -> DiskLayout:
    """The on-disk layout a table of ``source``'s rows is written in."""
    return DiskLayout.with_chunk_bytes(
        source.num_rows, source.head_dim, chunk_bytes, source.row_format.name
    )


def sample_crc(source: RowSource) -> int:
    """crc32 of a fixed spread of rows (first, last and evenly spaced ones).

    NOTE: part of every source's identity: the rule that decides reuse (see
    :mod:`engram.ssd.ensure`). The manifest's per-chunk crcs cover every byte, for
    ``verify="full"``. Row by row over the packed bytes: for ``e4m3-ue8m0`` the same
    value as the crc of each row's values then its exponents, what earlier builds
    recorded.
    """
    n = source.num_rows
    picks = np.unique(np.linspace(0, n - 1, num=min(n, SAMPLE_ROWS)).astype(np.int64))
    crc = 0
    for row in picks.tolist():
        crc = zlib.crc32(source.read(row, row + 1).tobytes(), crc)
    return crc


def format_identity(row_format: RowFormat) -> dict[str, Any]:
    """The row format's part of a source's identity: nothing for ``e4m3-ue8m0`` (the
    identity earlier builds recorded), else its name and parameters."""
    if row_format.name == DEFAULT_ROW_FORMAT:
        return {}
    return {"row_format": row_format.name, **row_format.params()}


class TensorRows:
    """Rows of in-memory tensors, e.g. what the model loader holds: ``weight`` and, for
    ``e4m3-ue8m0`` (the default format), ``scale``."""

    def __init__(
        self,
        weight: torch.Tensor,
        scale: torch.Tensor | None = None,
        *,
        row_format: RowFormat | None = None,
    ):
        self.num_rows, self.head_dim = (int(d) for d in weight.shape)
        self.row_format = row_format or E4m3Ue8m0Rows(self.head_dim)
        self._weight = weight.cpu()
        self._scale = None if scale is None else scale.cpu()
        self._identity: dict[str, Any] | None = None

    def read(self, start: int, stop: int) -> np.ndarray:
        scale = None if self._scale is None else self._scale[start:stop]
        return self.row_format.pack(self._weight[start:stop], scale)

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            self._identity = {
                "kind": "tensors",
                "rows": self.num_rows,
                "head_dim": self.head_dim,
                **format_identity(self.row_format),
                "sample_crc32": sample_crc(self),
            }
        return self._identity


class RowRange:
    """Rows ``[start, stop)`` of another row source (one TP rank's share)."""

    def __init__(self, source: RowSource, start: int, stop: int):
        if not 0 <= start < stop <= source.num_rows:
            raise EngramTableError(
                f"rows [{start}, {stop}) are no non-empty range of a table of "
                f"{source.num_rows:,} rows"
            )
        self._source, self._start, self._stop = source, start, stop
        self.num_rows, self.head_dim = stop - start, source.head_dim
        self.row_format = source.row_format

    def read(self, start: int, stop: int) -> np.ndarray:
        return self._source.read(self._start + start, self._start + stop)

    def identity(self) -> dict[str, Any]:
        return {**self._source.identity(), "shard": [self._start, self._stop]}

    def describe(self) -> str:
        return f"{describe_source(self._source)} (rows {self._start:,} to {self._stop:,})"
