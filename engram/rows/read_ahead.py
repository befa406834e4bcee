"""Reading an SSD table's rows ahead of the lookup that needs them.

``table.read_ahead(row_ids)`` returns a :class:`ReadAheadHandle` at once; a background
thread dedups the ids and reads their rows into the handle's own host buffer (pinned on
a GPU) or, past the table's read-ahead budget, only into the page cache. A later lookup
of exactly the ids read ahead takes the handle's rows as they are; any other lookup
takes every row it can from the live handles of its table done reading, then from the
RAM cache, then from handles still reading (waiting for them; skipping handles the
thread has not reached yet), and reads the rest. Handles live until released; when the
budget or ``MAX_LIVE_HANDLES`` is exceeded the oldest ones are released for the newest.
A request's row ids are known as soon as it is tokenized, so the plugin calls
``read_ahead`` at admission (and one decode step ahead). With chunked
prefill, read each chunk's ids ahead as its own handle, in order: a lookup waits for the
whole handle that holds rows it needs, and the thread fills handles first come first
served; a decode step's handles are ``urgent``: the thread fills them before the
others, and while they keep coming it reads a long fill in slices and fills them between.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import torch

from engram.files import GIB
from engram.ssd import kernels

# host memory a table's read-ahead handles may hold (``TableOptions.read_ahead_bytes``)
DEFAULT_READ_AHEAD_BYTES = GIB
# NOTE: every lookup searches every live handle for its rows, so their number bounds a
# lookup's cost (16 k ids: 29 ms over 64 handles, 0.9 s over 2,048, before the filters).
# The plugin releases a prompt's handles once its prefill has run; a caller that does
# not would keep them until the byte budget evicts them (a 1 GiB budget holds ~5,000
# prompts of 256 tokens of the tiny model). Past this count the oldest are released.
MAX_LIVE_HANDLES = 64
# NOTE: while urgent handles (decode steps reading ahead) came within this many seconds,
# a long fill reads in slices so they need not wait for all of it; otherwise it reads
# whole, the deepest queue the reader makes (slices of a lone prefill's read-ahead left
# 0.72 of its lookup's time exposed in bench_lookup.py, against 0.001 whole).
URGENT_WINDOW_S = 2.0
# bits of a handle's id filter per distinct id (one hash: ~6 % of the ids it does not
# hold pass to a binary search)
FILTER_BITS_PER_ID = 16


class ReadAheadHandle:
    def __init__(
        self, flat_ids: np.ndarray, *, keep_rows: bool, row_bytes: int, urgent: bool = False
    ):
        self.flat_ids = flat_ids  # as requested, duplicates included
        self.keep_rows = keep_rows
        self.urgent = urgent  # filled before the others (a decode step's next rows)
        self.row_bytes = row_bytes
        self.ids = np.empty(0, dtype=np.int64)  # sorted distinct ids, once deduplicated
        self.inverse = np.empty(0, dtype=np.int64)
        self.bits, self.shift = np.zeros(1, dtype=np.uint64), 58  # ``ids``' filter
        self.rows: torch.Tensor | None = None
        self.error: BaseException | None = None
        self.released = False
        self._deduped = threading.Event()
        self._done = threading.Event()
        self._on_release: Callable[[ReadAheadHandle], None] | None = None

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
        # NOTE: the filter before the ids: a lookup reads both once ``deduped()``.
        log2_bits = max(6, int(ids.size * FILTER_BITS_PER_ID - 1).bit_length())
        self.bits, self.shift = np.zeros(1 << (log2_bits - 6), dtype=np.uint64), 64 - log2_bits
        kernels.cache.mark_held(ids, self.bits, self.shift)
        self.ids, self.inverse = ids, inverse
        self._deduped.set()

    def _finish(self, rows: torch.Tensor | None, error: BaseException | None) -> None:
        self.rows, self.error = rows, error
        # NOTE: after setting rows: a release during the read (which cleared nothing
        # yet) must not leave them held; release() sets ``released`` before clearing.
        if self.released:
            self.rows = None
        self._deduped.set()
        self._done.set()


class ReadAheadThread:
    """One daemon thread that fills handles: urgent ones first, the others in
    submission order. While urgent handles keep coming (:meth:`urgent_recently`) a long
    fill reads in slices and calls :meth:`fill_urgent` between them, so an urgent handle
    waits for one slice of another handle's reads, not all of them."""

    def __init__(self, fill: Callable[[ReadAheadHandle], torch.Tensor | None]):
        self._fill = fill
        self._urgent: deque[ReadAheadHandle] = deque()
        self._queued: deque[ReadAheadHandle] = deque()
        self._ready = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._last_urgent = -URGENT_WINDOW_S  # time.monotonic() of the last urgent submit

    def urgent_recently(self) -> bool:
        """Whether an urgent handle was submitted within ``URGENT_WINDOW_S``."""
        return time.monotonic() - self._last_urgent < URGENT_WINDOW_S

    def submit(self, handle: ReadAheadHandle) -> None:
        if handle.urgent:
            self._last_urgent = time.monotonic()
        with self._ready:
            # NOTE: a thread that is closing fills this one too before it stops.
            if self._thread is None:
                self._closing = False
                self._thread = threading.Thread(
                    target=self._run, name="engram-read-ahead", daemon=True
                )
                self._thread.start()
            (self._urgent if handle.urgent else self._queued).append(handle)
            self._ready.notify()

    def fill_urgent(self) -> None:
        """Fill the urgent handles submitted so far (on the read-ahead thread)."""
        while True:
            with self._ready:
                if not self._urgent:
                    return
                handle = self._urgent.popleft()
            self._fill_one(handle)

    def close(self) -> None:
        """Stop the thread once it has filled every handle submitted."""
        with self._ready:
            thread = self._thread
            self._closing = True
            self._ready.notify()
        if thread is not None:
            thread.join()

    def _next(self) -> ReadAheadHandle | None:
        with self._ready:
            while not (self._urgent or self._queued or self._closing):
                self._ready.wait()
            for waiting in (self._urgent, self._queued):
                if waiting:
                    return waiting.popleft()
            self._thread = None  # NOTE: under the lock: a later submit starts a new one
            return None

    def _fill_one(self, handle: ReadAheadHandle) -> None:
        try:
            rows = self._fill(handle)
        except Exception as err:  # noqa: BLE001 - the lookup re-reads and reports
            handle._finish(None, err)
        else:
            handle._finish(rows, None)

    def _run(self) -> None:
        while (handle := self._next()) is not None:
            self._fill_one(handle)


class ReadAhead:
    """A table's live handles within its byte budget and ``MAX_LIVE_HANDLES`` (the oldest
    released for the newest), filled by one :class:`ReadAheadThread`; counts the rows lookups
    take from them."""

    def __init__(self, fill: Callable[[ReadAheadHandle], torch.Tensor | None], budget: int):
        self._thread = ReadAheadThread(fill)
        self._budget = budget
        self._handles: list[ReadAheadHandle] = []
        self._lock = threading.Lock()
        self.hits = 0  # rows lookups took from handles

    def submit(
        self, flat_ids: np.ndarray, row_bytes: int, *, urgent: bool = False
    ) -> ReadAheadHandle:
        """A handle reading the rows of ``flat_ids`` (the handle keeps the array);
        ``urgent``: before the handles submitted without it."""
        handle = ReadAheadHandle(
            flat_ids,
            keep_rows=flat_ids.size * row_bytes <= self._budget,
            row_bytes=row_bytes,
            urgent=urgent,
        )
        evicted = []
        with self._lock:
            while self._handles and (
                len(self._handles) >= MAX_LIVE_HANDLES
                or self.held_bytes() + handle.nbytes > self._budget
            ):
                evicted.append(self._handles.pop(0))
            handle._on_release = self._forget
            self._handles.append(handle)
        for old in evicted:
            old.release()
        self._thread.submit(handle)
        return handle

    def fill_urgent(self) -> None:
        """Fill the urgent handles submitted so far (a fill calls this between slices)."""
        self._thread.fill_urgent()

    def urgent_recently(self) -> bool:
        """Whether decode steps are reading ahead (an urgent handle came lately)."""
        return self._thread.urgent_recently()

    def held_bytes(self) -> int:
        return sum(h.nbytes for h in list(self._handles))

    def exact(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, torch.Tensor] | None:
        """(distinct ids, inverse, rows) of a handle that read exactly ``flat``, once its
        rows are in; ``None`` if there is none."""
        for handle in self._live():
            if handle.keep_rows and np.array_equal(handle.flat_ids, flat) and handle.wait():
                rows = handle.rows  # NOTE: read once; a release may clear it meanwhile
                if rows is not None:
                    self.hits += handle.ids.size
                    return handle.ids, handle.inverse, rows
        return None

    def take_read(
        self, ids: np.ndarray, out: np.ndarray, need: np.ndarray
    ) -> list[ReadAheadHandle]:
        """Copy the rows of distinct ``ids`` still ``need``-ed that live handles done
        reading hold into ``out`` (row ``i`` for ``ids[i]``) and clear their ``need``.
        Returns the handles still reading, for :meth:`take_reading` once the caller has
        taken what it holds elsewhere."""
        done, reading = [], []
        for handle in self._live():
            if handle.deduped() and handle.ids.size:  # NOTE: not started: read ourselves
                (done if handle.done() else reading).append(handle)
        self.take_reading(done, ids, out, need)
        return reading

    def take_reading(
        self, handles: list[ReadAheadHandle], ids: np.ndarray, out: np.ndarray, need: np.ndarray
    ) -> int:
        """Copy the rows still ``need``-ed that ``handles`` hold, waiting for each that
        holds any. Returns how many rows they gave."""
        taken = 0
        for handle in handles:
            if kernels.cache.any_held(handle.ids, handle.bits, handle.shift, ids, need):
                taken += self._take(handle, ids, out, need)
        return taken

    def _take(
        self, handle: ReadAheadHandle, ids: np.ndarray, out: np.ndarray, need: np.ndarray
    ) -> int:
        if not handle.wait():
            return 0  # failed: re-read by the caller
        rows = handle.rows
        if rows is None:  # page cache only, or released meanwhile
            return 0
        taken = kernels.cache.take_held(
            handle.ids, handle.bits, handle.shift, rows.numpy(), ids, need, out
        )
        self.hits += taken
        return taken

    def _live(self) -> list[ReadAheadHandle]:
        with self._lock:
            return list(self._handles)

    def _forget(self, handle: ReadAheadHandle) -> None:
        with self._lock:
            if handle in self._handles:
                self._handles.remove(handle)

    def close(self) -> None:
        self._thread.close()
        with self._lock:
            handles, self._handles = self._handles, []
        for handle in handles:
            handle.release()
