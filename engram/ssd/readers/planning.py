"""A reader's plan of one read, in arrays that are reused from read to read.

:class:`ReadPlan` holds the arrays :func:`engram.ssd.kernels.plan.plan` fills (grown to
the largest read seen, never shrunk) and exposes the filled part of each. A plan
belongs to one thread (readers keep one per thread: the lookup and the read-ahead
thread read at once).
"""

from __future__ import annotations

import numpy as np

from engram.files import MIB
from engram.ssd import kernels
from engram.ssd.kernels.constants import COUNT, END_BLOCK, END_ROW, END_RUN, FIRST, SLOT
from engram.ssd.layout import DiskLayout

WINDOW_BYTES = MIB
DENSE_FRACTION = 0.4  # a window needing this share of its blocks is read whole
NO_SKIP = np.zeros(0, dtype=bool)

__all__ = ["COUNT", "END_BLOCK", "END_ROW", "END_RUN", "FIRST", "SLOT", "ReadPlan"]


class ReadPlan:
    def __init__(
        self,
        layout: DiskLayout,
        *,
        max_run_bytes: int,
        batch_bytes: int = 1 << 62,
        windows: bool = True,
        in_file: bool = False,
    ):
        """Plans for reads of ``layout``'s file: runs of at most ``max_run_bytes``,
        batches of about ``batch_bytes``, whole ``WINDOW_BYTES`` windows where a window
        needs ``DENSE_FRACTION`` of its blocks (``windows``), row and block places in
        the file (``in_file``) or in each batch's buffer."""
        self.layout = layout
        self.max_run = max(1, max_run_bytes // layout.block_bytes)
        self.batch_blocks = max(1, batch_bytes // layout.block_bytes)
        self.window = max(1, WINDOW_BYTES // layout.block_bytes) if windows else 0
        self.dense = max(1, int(np.ceil(DENSE_FRACTION * self.window)))
        self.in_file = in_file
        # NOTE: a whole window read is up to ceil(window / max_run) runs for at least
        # `dense` of the ids' blocks; the kernel writes without bounds checks.
        per_window = -(-self.window // self.max_run)
        self._runs_per_id = max(1, -(-per_window // self.dense))
        self._room = 0
        self._grow(1024)
        self.size = self.k = self.r = self.b = 0

    def _grow(self, n: int) -> None:
        room = max(n, 2 * self._room)
        self._blocks = np.empty(room, dtype=np.int64)
        self._block_at = np.empty(room, dtype=np.int64)
        self._row_at = np.empty(room, dtype=np.int64)
        runs = self._runs_per_id * room + 16
        self._batches = np.empty((runs, 3), dtype=np.int64)
        self._runs = np.empty((runs, 3), dtype=np.int64)
        self._room = room

    def make(self, ids: np.ndarray, skip: np.ndarray = NO_SKIP) -> ReadPlan:
        """Plan reading the rows of sorted distinct ``ids`` (``skip``: a flag per block
        of the file for blocks not to read)."""
        if ids.size > self._room:
            self._grow(ids.size)
        layout = self.layout
        self.size = ids.size
        self.k, self.r, self.b = kernels.plan.plan(
            ids,
            layout.rows_per_block,
            layout.row_bytes,
            layout.block_bytes,
            layout.num_blocks,
            skip,
            self.window,
            self.dense,
            self.max_run,
            self.batch_blocks,
            self.in_file,
            self._blocks,
            self._block_at,
            self._runs,
            self._batches,
            self._row_at,
        )
        return self

    @property
    def blocks(self) -> np.ndarray:
        """The distinct blocks of the ids, ascending."""
        return self._blocks[: self.k]

    @property
    def block_at(self) -> np.ndarray:
        return self._block_at[: self.k]

    @property
    def row_at(self) -> np.ndarray:
        return self._row_at[: self.size]

    @property
    def runs(self) -> np.ndarray:
        """``[r, 3]``: ``FIRST`` block, block ``COUNT``, ``SLOT`` in its batch's buffer."""
        return self._runs[: self.r]

    @property
    def batches(self) -> np.ndarray:
        """``[b, 3]``: exclusive ends ``END_RUN``, ``END_ROW``, ``END_BLOCK``."""
        return self._batches[: self.b]

    def buffer_blocks(self) -> int:
        """Blocks a buffer needs to hold any one batch."""
        last = self.runs[self.batches[:, END_RUN] - 1]
        return int((last[:, SLOT] + last[:, COUNT]).max(initial=0))
