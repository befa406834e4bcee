"""Reading an SSD table's rows ahead of the lookup that needs them.

``table.prefetch(row_ids)`` returns a :class:`PrefetchHandle` at once; a background
thread dedups the ids and reads their rows into the handle's own host buffer (pinned on
a GPU) or, past the table's prefetch budget, only into the page cache. A later lookup
of exactly the prefetched ids takes the handle's rows as they are; any other lookup
takes every row it can from the live handles of its table (waiting for a handle still
reading rows it needs; skipping handles the thread has not reached yet) and reads the
rest. Handles live until released; when the budget is exceeded the oldest ones are
released for the newest. A request's row ids are known as soon as it is tokenized, so
the plugin calls ``prefetch`` at admission (and one decode step ahead). With chunked
prefill, prefetch each chunk's ids as its own handle, in order: a lookup waits for the
whole handle that holds rows it needs, and the thread fills handles first come first
served.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import numpy as np
import torch

from engram.files import GIB

# host memory a table's prefetch handles may hold (``TableOptions.prefetch_bytes``)
DEFAULT_PREFETCH_BYTES = GIB


class PrefetchHandle:
    def __init__(self, flat_ids: np.ndarray, *, keep_rows: bool, row_bytes: int):
        self.flat_ids = flat_ids  # as requested, duplicates included
        self.keep_rows = keep_rows
        self.row_bytes = row_bytes
        self.ids = np.empty(0, dtype=np.int64)  # sorted distinct ids, once deduplicated
        self.inverse = np.empty(0, dtype=np.int64)
        self.rows: torch.Tensor | None = None
        self.error: BaseException | None = None
        self.released = False
        self._deduped = threading.Event()
        self._done = threading.Event()
        self._on_release: Callable[[PrefetchHandle], None] | None = None

    @property
    def nbytes(self) -> int:
        """Host bytes the handle holds (or will hold: an upper bound until deduplicated)."""
        if not self.keep_rows or self.released:
            return 0
        count = self.ids.size if self._deduped.is_set() else self.flat_ids.size
        return count * self.row_bytes

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until read; True if the rows (or pages) are now in RAM."""
        self._done.wait(timeout)
        return self._done.is_set() and self.error is None

    def deduped(self) -> bool:
        return self._deduped.is_set()

    def release(self) -> None:
        """Free the rows; later lookups read them from the table again."""
        self.released = True
        self.rows = None
        if self._on_release is not None:
            callback, self._on_release = self._on_release, None
            callback(self)

    def _set_ids(self, ids: np.ndarray, inverse: np.ndarray) -> None:
        self.ids, self.inverse = ids, inverse
        self._deduped.set()

    def _finish(self, rows: torch.Tensor | None, error: BaseException | None) -> None:
        self.rows, self.error = rows, error
        self._deduped.set()
        self._done.set()


class Prefetcher:
    """One daemon thread that fills handles in submission order."""

    def __init__(self, fill: Callable[[PrefetchHandle], torch.Tensor | None]):
        self._fill = fill
        self._queue: queue.SimpleQueue[PrefetchHandle | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, handle: PrefetchHandle) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="engram-prefetch", daemon=True)
            self._thread.start()
        self._queue.put(handle)

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while (handle := self._queue.get()) is not None:
            try:
                rows = self._fill(handle)
            except Exception as err:  # noqa: BLE001 - the lookup re-reads and reports
                handle._finish(None, err)
            else:
                handle._finish(rows, None)


def exact_match(
    handles: list[PrefetchHandle], flat: np.ndarray
) -> tuple[np.ndarray, np.ndarray, torch.Tensor] | None:
    """(distinct ids, inverse, rows) of a handle that prefetched exactly ``flat``, once
    its rows are read; ``None`` if there is none."""
    for handle in handles:
        if handle.keep_rows and np.array_equal(handle.flat_ids, flat) and handle.wait():
            rows = handle.rows  # NOTE: read once; a release may clear it meanwhile
            if rows is not None:
                return handle.ids, handle.inverse, rows
    return None


def take_rows(handles: list[PrefetchHandle], ids: np.ndarray, out: torch.Tensor) -> np.ndarray:
    """Copy the rows of sorted distinct ``ids`` that ``handles`` hold into ``out``;
    return the mask of ids still needed."""
    need = np.ones(ids.size, dtype=bool)
    for handle in handles:
        if not handle.deduped() or handle.ids.size == 0:
            continue  # not started yet: reading ourselves beats waiting behind others
        pos = np.minimum(np.searchsorted(handle.ids, ids), handle.ids.size - 1)
        match = need & (handle.ids[pos] == ids)
        rows = handle.rows if match.any() and handle.wait() else None
        if rows is None:
            continue  # not ours, failed (re-read by the caller), or page cache only
        where = np.flatnonzero(match)
        out[torch.from_numpy(where)] = rows[torch.from_numpy(pos[where])]
        need[where] = False
        if not need.any():
            break
    return need
