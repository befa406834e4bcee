"""Where each row of an Engram table sits in its SSD data file.

A table directory holds ``manifest.json`` (see :mod:`engram.ssd.manifest`) and one data
file, ``rows.bin``, of *blocks*. A row is ``row_bytes`` bytes in the table's row format
(:mod:`engram.row_formats`; ``e4m3-ue8m0``: ``head_dim`` e4m3 bytes followed by their
``head_dim / 32`` ue8m0 exponent bytes, 264 bytes for DSv4.1; ``e4m3-tensor-scale``: 160
bytes for Qwen3.8's PLE). A block packs ``rows_per_block`` consecutive rows from its start and is
zero-padded to a whole number of 4 KiB pages, so **no row straddles a page** and one
page read always yields whole rows::

    block b = rows [b * R, (b + 1) * R)   R = max(1, 4096 // row_bytes)
    row r   at byte (r // R) * block_bytes + (r % R) * row_bytes

For 264-byte rows a block is one page holding 15 rows (3,960 bytes + 136 bytes of
padding, 3.4 % overhead), for 160-byte rows 25 (96 bytes of padding); rows wider than a page start on a page boundary instead. The
last block is padded too, so the file size is always a whole number of pages. The file
is checksummed in *chunks* of whole blocks (crc32 per chunk, listed in the manifest).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engram.errors import EngramTableError
from engram.fp8 import FP8_BLOCK
from engram.row_formats import DEFAULT_ROW_FORMAT, row_format_class

PAGE_BYTES = 4096
DEFAULT_CHUNK_BYTES = 64 << 20


@dataclass(frozen=True)
class DiskLayout:
    """Where the rows of one table sit in its data file (the on-disk row layout; not
    upstream's ``EngramLayout`` of hash columns, nor a host table's layout)."""

    num_rows: int
    head_dim: int
    chunk_blocks: int = DEFAULT_CHUNK_BYTES // PAGE_BYTES
    row_format: str = DEFAULT_ROW_FORMAT  # a name in engram.row_formats.ROW_FORMATS

    def __post_init__(self) -> None:
        if self.num_rows < 1:
            raise EngramTableError(f"an SSD table needs at least one row, got {self.num_rows}")
        row_format_class(self.row_format).check_head_dim(self.head_dim)
        if self.chunk_blocks < 1:
            raise EngramTableError(f"chunk_blocks must be >= 1, got {self.chunk_blocks}")

    @classmethod
    def with_chunk_bytes(
        cls, num_rows: int, head_dim: int, chunk_bytes: int, row_format: str = DEFAULT_ROW_FORMAT
    ) -> DiskLayout:
        probe = cls(num_rows, head_dim, 1, row_format)
        return cls(num_rows, head_dim, max(1, chunk_bytes // probe.block_bytes), row_format)

    @property
    def key(self) -> list[int | str]:
        """What identifies the layout in a manifest's digest and a conversion's progress.

        NOTE: an ``e4m3-ue8m0`` layout's key is the one of the builds before row formats
        existed, so their tables and half-written conversions stay valid."""
        key: list[int | str] = [self.num_rows, self.head_dim, self.chunk_blocks]
        return key if self.row_format == DEFAULT_ROW_FORMAT else [self.row_format, *key]

    @property
    def scale_dim(self) -> int:
        """Exponent bytes of an ``e4m3-ue8m0`` row."""
        return self.head_dim // FP8_BLOCK

    @property
    def row_bytes(self) -> int:
        return row_format_class(self.row_format).row_bytes_of(self.head_dim)

    @property
    def rows_per_block(self) -> int:
        return max(1, PAGE_BYTES // self.row_bytes)

    @property
    def block_bytes(self) -> int:
        used = self.rows_per_block * self.row_bytes
        return -(-used // PAGE_BYTES) * PAGE_BYTES

    @property
    def pages_per_block(self) -> int:
        return self.block_bytes // PAGE_BYTES

    @property
    def num_blocks(self) -> int:
        return -(-self.num_rows // self.rows_per_block)

    @property
    def file_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_blocks * self.block_bytes

    @property
    def chunk_rows(self) -> int:
        return self.chunk_blocks * self.rows_per_block

    @property
    def num_chunks(self) -> int:
        return -(-self.num_blocks // self.chunk_blocks)

    def chunk_span(self, index: int) -> tuple[int, int, int]:
        """(first row, row count, byte length) of chunk ``index``."""
        first = index * self.chunk_rows
        rows = min(self.chunk_rows, self.num_rows - first)
        blocks = -(-rows // self.rows_per_block)
        return first, rows, blocks * self.block_bytes

    def pack(self, rows: np.ndarray) -> np.ndarray:
        """Packed rows ``[k, row_bytes]`` (uint8, starting on a block boundary) as the
        bytes of whole blocks, the last one zero-padded."""
        k = rows.shape[0]
        if rows.shape[1:] != (self.row_bytes,):
            raise EngramTableError(
                f"packed rows are {list(rows.shape)}, the layout needs [k, {self.row_bytes}]"
            )
        blocks = -(-k // self.rows_per_block)
        dense = np.zeros((blocks * self.rows_per_block, self.row_bytes), dtype=np.uint8)
        dense[:k] = rows
        out = np.zeros((blocks, self.block_bytes), dtype=np.uint8)
        out[:, : self.rows_per_block * self.row_bytes] = dense.reshape(blocks, -1)
        return out.reshape(-1)
