"""``ssd``: rows in files on local NVMe, read on demand (format: :mod:`engram.ssd.layout`).

A lookup dedups its row ids, takes what it can from read-ahead handles done reading,
the RAM row cache and handles still reading, reads the rest from the data file with the
chosen read strategy (only the pages holding them), gathers everything into a bounce
buffer (pinned on a GPU), copies it to the device asynchronously and dequantises there.
Every block is checked against its hash the first time it is read from the disk
(:mod:`engram.ssd.block_hashes`), so rows reach the RAM cache, the read-ahead handles
and the caller only from checked blocks. An I/O error fails that one lookup with
:class:`EngramIOError`; a block that fails its check fails it with
:class:`EngramChecksumError` and marks the table damaged (the next start converts it
again). Both count as ``io_errors``. A data file that changes under
the table is a permanent fault (every later lookup raises). With a ``seed`` (rows ranked
by a frequency profile), a background thread fills the RAM cache with the hottest rows
that fit it while the table serves (:mod:`engram.ssd.seeding`).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np
import torch

from engram.errors import EngramTableError
from engram.ssd.bounce_buffers import BounceBuffers
from engram.ssd.ensure import ensure_table, resolve_table_dir
from engram.ssd.faults import EngramChecksumError, EngramIOError
from engram.ssd.integrity import FileGuard, mark_damaged, verify_table
from engram.ssd.kernels import compile_kernels
from engram.ssd.manifest import TableManifest
from engram.ssd.prefetch import PrefetchHandle, ReadAhead
from engram.ssd.readers import ALL_ROWS, open_reader
from engram.ssd.row_cache import RowCache
from engram.ssd.seeding import Seeder, SeedRows
from engram.ssd.sources import TensorRows
from engram.tables.base import EngramTable
from engram.tables.options import TableOptions

# NOTE: while decode steps read ahead (engram.ssd.prefetch.URGENT_WINDOW_S), the
# read-ahead thread reads a handle's rows from the disk this many at a time and fills
# the urgent handles (the next decode step's) between slices, so those and a lookup's
# own reads queue at the disk behind at most one slice, not a whole prompt's
# (4,700 reads of a 256-token prompt took 0.4 s on this VM's disk). 512 reads in flight
# is the depth at which that disk gave the most (11.2 k 4 KiB reads/s; 9.5 k at 64:
# benchmark/disk_probe.py).
AHEAD_READ_ROWS = 512

logger = logging.getLogger(__name__)


class SsdTable(EngramTable):
    placement = "ssd"
    options = frozenset(
        {
            "path",
            "layer",
            "source",
            "read",
            "ram_cache_bytes",
            "prefetch_bytes",
            "verify",
            "chunk_bytes",
            "seed",
        }
    )
    hot_cache = True

    @classmethod
    def open(
        cls, weight: torch.Tensor | None, scale: torch.Tensor | None, options: TableOptions
    ) -> SsdTable:
        """Write the table under ``options.path`` from the given rows (``weight`` and
        ``scale``, or ``options.source``) unless it holds them already; with no rows,
        open it as it is."""
        path = options.table_path
        if path is None:
            raise EngramTableError("the 'ssd' placement needs path=<directory of the table files>")
        if weight is not None and options.source is not None:
            raise EngramTableError("give the ssd table's rows as weight and scale or as source")
        source = options.source if weight is None else TensorRows(weight, scale)
        directory = resolve_table_dir(path, options.layer)
        manifest = ensure_table(directory, source, chunk_bytes=options.chunk_bytes)
        return cls(directory, manifest, options)

    def __init__(
        self,
        directory: Path,
        manifest: TableManifest,
        options: TableOptions,
        *,
        check_blocks: bool = True,
    ):
        """The table ``manifest`` describes, in ``directory``. ``check_blocks=False``
        serves rows without checking their blocks: only for
        ``benchmark/bench_lookup.py --compare-checks``, which measures what the checks
        cost (:meth:`open` has no such option)."""
        for what, want, have in (
            ("rows are", options.head_dim, manifest.head_dim),
            ("row count is", options.num_rows, manifest.num_rows),
        ):
            if want is not None and want != have:
                raise EngramTableError(
                    f"SSD table {directory}: its {what} {have:,} but the spec expects {want:,}"
                )
        self._checks = verify_table(directory, manifest, options.verify)
        super().__init__(
            manifest.num_rows, manifest.head_dim, options.torch_device, manifest.row_format
        )
        self.directory = directory
        self.manifest = manifest
        layout = manifest.layout
        self._reader = open_reader(
            options.read,
            directory / manifest.data_file,
            layout,
            self._checks if check_blocks else None,
        )
        self._marked_damaged = False
        self._guard = FileGuard(self._reader.path, self._reader.fd, layout.file_bytes)
        # NOTE: never larger than the table: a cache sized by the flag alone would hold
        # (and report) gigabytes for a megabyte table.
        cache_bytes = min(options.ram_cache_bytes, manifest.num_rows * self.row_bytes)
        self._cache = RowCache(cache_bytes, self.row_bytes) if cache_bytes > 0 else None
        self._bounce = BounceBuffers(self.row_bytes, self.device)
        self._ahead = ReadAhead(self._fill_prefetch, options.prefetch_bytes)
        self._lock = threading.RLock()  # lookups of one table run one at a time
        self._scratch = threading.local()  # per thread: the read-ahead thread reads too
        self.io_errors = 0
        # NOTE: seconds, cumulative: disk reads a lookup made itself ("lookup") or the
        # read-ahead thread made ("ahead"), and a lookup's waits on read-ahead handles.
        # (lookup + waits) / (lookup + ahead) is the read time read-ahead did not hide.
        self.read_seconds = {"lookup": 0.0, "ahead": 0.0}
        self.rows_read = {"lookup": 0, "ahead": 0}  # NOTE: rows asked of the file, the same way
        self.handle_wait_seconds = 0.0
        self._cache_hits = 0  # RAM cache hits of the current fetch
        compile_kernels()  # NOTE: now, not on the first request (numba, cached on disk)
        self._seeder: Seeder | None = None
        if options.seed is not None:
            self._check_seed(options.seed)
            if self._cache is None and not options.hot_cache_capacity:
                logger.warning(
                    "%s: not seeded: the table has no RAM cache or hot cache", options.seed.name
                )
            elif self._cache is not None:
                self._seeder = Seeder(options.seed, self._cache, self._read, self.row_bytes)

    def _check_seed(self, seed: SeedRows) -> None:
        ids = seed.ids
        if ids.ndim != 1 or ids.dtype != np.int64:
            raise EngramTableError(f"{seed.name}: seed rows must be 1-D int64, got {ids.dtype}")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.num_rows):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise EngramTableError(
                f"{seed.name}: row {bad:,} is outside this table's {self.num_rows:,} rows "
                "(a profile of another table?)"
            )

    # ---- lookups ----------------------------------------------------------------------

    def fetch(self, ids: torch.Tensor) -> tuple[np.ndarray, np.ndarray, torch.Tensor, int | None]:
        """The host half of a lookup: (distinct ids, inverse, their packed rows, bounce
        index or ``None`` for a prefetch handle's rows). Valid until the next fetch;
        the benchmark times this (the device copy and dequantisation follow in lookup)."""
        with self._lock:
            try:
                return self._fetch(ids)
            except EngramIOError:
                self.io_errors += 1  # NOTE: failed lookups; a failed read-ahead is re-read
                raise

    def _fetch(self, ids: torch.Tensor) -> tuple[np.ndarray, np.ndarray, torch.Tensor, int | None]:
        self._guard.check()
        flat_ids = ids.reshape(-1).to("cpu", torch.int64)
        if ids.is_cuda:
            # NOTE: base.lookup checks host ids but skips GPU ids (a sync); these reach
            # the host anyway, and a bad id would become a bad file offset.
            self._check_ids(flat_ids)
        flat = flat_ids.numpy()
        self._cache_hits = 0
        started = time.perf_counter()
        exact = self._ahead.exact(flat)
        if exact is not None:
            self.handle_wait_seconds += time.perf_counter() - started
            return (*exact, None)
        unique, inverse = np.unique(flat, return_inverse=True)
        index, rows = self._bounce.acquire(unique.size)
        out = rows.numpy()
        need = self._need(unique.size)
        started = time.perf_counter()
        reading = self._ahead.take_read(unique, out, need)
        self.handle_wait_seconds += time.perf_counter() - started
        self._cache_hits, at = self._from_cache(unique, out, need)
        if reading and (at is ALL_ROWS or at.size):
            # NOTE: only now, after the RAM cache: a handle still reading admits its
            # rows to the cache as it goes, so waiting for it first made lookups wait for
            # rows the cache already held (in a replay, all of them).
            started = time.perf_counter()
            if self._ahead.take_reading(reading, unique, out, need):
                at = np.flatnonzero(need)  # NOTE: allocates only when such handles gave rows
            self.handle_wait_seconds += time.perf_counter() - started
        self._from_file(unique, out, at)
        return unique, inverse, rows, index

    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, int]]:
        with self._lock:
            unique, inverse, rows, index = self.fetch(ids)
            packed = self._bounce.to_device(index, rows)
            # NOTE: on a CPU device `packed` is the bounce buffer itself; dequantising
            # makes a new tensor, so the buffer is free for the next lookup.
            values = self.row_format.dequantize(packed)
            from_ram = self._cache_hits
        out = values[torch.from_numpy(inverse).to(self.device)]
        # NOTE: prefetched rows were read from the SSD too (ahead of time).
        tiers = {"ssd": (unique.size - from_ram) * self.row_bytes}
        if from_ram:
            tiers["dram"] = from_ram * self.row_bytes
        return out, unique.size, tiers

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        # NOTE: from the file, past the RAM cache and its hit and miss counts.
        flat = ids.to("cpu", torch.int64).numpy()
        out = np.empty((flat.size, self.row_bytes), np.uint8)
        self._read(flat, out)
        return self.row_format.dequantize(torch.from_numpy(out).to(self.device))

    def _need(self, n: int) -> np.ndarray:
        """This thread's ``need`` flags for ``n`` rows, all set."""
        held = getattr(self._scratch, "need", None)
        if held is None or held.size < n:
            held = self._scratch.need = np.empty(max(n, 1024), dtype=bool)
            self._scratch.missed = np.empty(held.size, dtype=np.int64)
            self._scratch.ids = np.empty(held.size, dtype=np.int64)
        need = held[:n]
        need[:] = True
        return need

    def _from_cache(
        self, ids: np.ndarray, out: np.ndarray, need: np.ndarray, *, by: str = "lookup"
    ) -> tuple[int, np.ndarray]:
        """Rows of sorted distinct ``ids`` still ``need``-ed (``self._need``'s flags) that
        the RAM cache holds into ``out``, their ``need`` cleared. Returns (hits, positions
        in ``ids`` of the rows still needed, ``ALL_ROWS`` for all of them). ``by``: whose
        hits and misses they count as (``engram.ssd.row_cache.PROBERS``)."""
        if self._cache is not None:
            scratch = self._scratch
            hits, missed = self._cache.take(ids, need, out, scratch.missed[: ids.size], by=by)
            return hits, scratch.missed[:missed]
        if need.all():
            return 0, ALL_ROWS
        return 0, np.flatnonzero(need)  # NOTE: only after read-ahead handles gave rows

    def _from_file(
        self, ids: np.ndarray, out: np.ndarray, at: np.ndarray, *, by: str = "lookup"
    ) -> None:
        """The rows of ``ids[at]`` (all of them for ``ALL_ROWS``) from the file into
        ``out`` (row ``i`` for ``ids[i]``; read time counted under ``by``), admitted to
        the RAM cache."""
        miss = ids if at is ALL_ROWS else np.take(ids, at, out=self._scratch.ids[: at.size])
        if miss.size == 0:
            return
        started = time.perf_counter()
        self._read(miss, out, at)
        self.read_seconds[by] += time.perf_counter() - started
        self.rows_read[by] += miss.size
        if self._cache is not None:
            self._cache.put(miss, out, at)

    def _read(self, ids: np.ndarray, out: np.ndarray, at: np.ndarray = ALL_ROWS) -> None:
        """The rows of sorted distinct ``ids`` from the file into ``out`` (``at`` as the
        reader takes it), a failure said as :class:`EngramIOError` (a block that fails
        its check marks the table damaged)."""
        try:
            self._reader.read_rows(ids, out, at)
        except EngramChecksumError as err:
            self._guard.check()  # a file that changed is a permanent fault, said as such
            if not self._marked_damaged:
                self._marked_damaged = True
                mark_damaged(self.directory, err)
            raise EngramChecksumError(
                f"{err}. This lookup failed; the table is marked to be converted again at "
                "the next start, its other blocks keep serving",
                err.directory,
                err.chunk,
            ) from err
        except OSError as err:
            self._guard.check()  # a file that changed is a permanent fault, said as such
            raise EngramIOError(
                f"I/O error reading {ids.size:,} rows of SSD table {self.directory}: {err}. "
                "Only this lookup failed; the table keeps serving"
            ) from err

    # ---- prefetch ---------------------------------------------------------------------

    def prefetch(self, row_ids: torch.Tensor, *, urgent: bool = False) -> PrefetchHandle:
        """Start reading ``row_ids``' rows in the background; see :mod:`engram.ssd.prefetch`."""
        flat = row_ids.reshape(-1).to("cpu", torch.int64)
        self._check_ids(flat)
        return self._ahead.submit(flat.numpy().copy(), self.row_bytes, urgent=urgent)

    def _fill_prefetch(self, handle: PrefetchHandle) -> torch.Tensor | None:
        ids, inverse = np.unique(handle.flat_ids, return_inverse=True)
        handle._set_ids(ids, inverse)
        if handle.released:
            return None
        if not handle.keep_rows:
            started = time.perf_counter()
            self._reader.warm(ids)
            self.read_seconds["ahead"] += time.perf_counter() - started
            return None
        pinned = self.device.type == "cuda"
        rows = torch.empty(
            (ids.size, self.row_bytes), dtype=torch.uint8, device="cpu", pin_memory=pinned
        )
        out = rows.numpy()
        # NOTE: counted apart from the lookups' probes: the rows reach a lookup through the
        # handle (prefetch_hits) or the cache, and a lookup counts only the latter. Counted
        # with them, an ssd server's /metrics showed more RAM-cache misses than rows requested.
        by = "decode_ahead" if handle.urgent else "prompt_ahead"
        _, at = self._from_cache(ids, out, self._need(ids.size), by=by)
        # NOTE: a copy: the urgent fills between slices reuse this thread's scratch.
        at = np.arange(ids.size) if at is ALL_ROWS else at.copy()
        sliced = not handle.urgent and self._ahead.urgent_recently()
        step = AHEAD_READ_ROWS if sliced else max(1, at.size)
        for start in range(0, at.size, step):
            if sliced:
                self._ahead.fill_urgent()
            if handle.released:
                return None  # NOTE: nobody takes its rows: the disk is spared the rest
            self._from_file(ids, out, at[start : start + step], by="ahead")
        return rows

    def refresh_residency(self) -> None:
        """Re-learn now which pages of the file the page cache holds (the mmap reader
        also does this continuously in the background)."""
        self._reader.refresh_residency()

    # ---- state --------------------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        """The SSD tier's own counters (always these keys), for ``/metrics``:

        ``ram_cache_hit_ratio`` (hits / lookups of distinct rows in the RAM row cache; 0
        without one), ``ram_cache_hits`` and ``ram_cache_misses`` (each distinct row of a
        lookup not taken from a read-ahead handle done reading, once: their sum is at most
        ``unique_rows``; the read-ahead's own probes are not counted there but in
        ``ram_cache_prompt_ahead_hits`` / ``_misses`` (each distinct row of a prompt's
        read-ahead at admission, once, as the fill looks for it in the RAM cache before
        reading the disk) and ``ram_cache_decode_ahead_hits`` / ``_misses`` (the same for
        a decode step's read-ahead); a row a lookup wants from a handle still reading is
        counted by both), ``ram_cache_bytes``,
        ``prefetch_hits`` (rows taken from read-ahead handles), ``prefetch_bytes_held``,
        ``pages_requested`` (pages asked of the data file), ``io_errors`` (lookups
        failed by an I/O error), ``lookup_rows_read`` / ``ahead_rows_read`` (rows read
        from the data file by lookups / by the read-ahead thread: the page cache may
        serve some), ``lookup_read_seconds`` / ``ahead_read_seconds`` (disk read time of
        lookups / of the read-ahead thread), ``handle_wait_seconds``
        (lookups waiting on read-ahead handles), ``seeded_rows`` (rows a seed put into
        the RAM cache) and ``seed_seconds`` (how long seeding ran, so far).
        """
        out = {
            "ram_cache_hit_ratio": 0.0,
            "ram_cache_hits": 0,
            "ram_cache_misses": 0,
            "ram_cache_bytes": 0,
            "ram_cache_prompt_ahead_hits": 0,
            "ram_cache_prompt_ahead_misses": 0,
            "ram_cache_decode_ahead_hits": 0,
            "ram_cache_decode_ahead_misses": 0,
            "prefetch_hits": self._ahead.hits,
            "prefetch_bytes_held": self._ahead.held_bytes(),
            "pages_requested": self._reader.pages_requested,
            "io_errors": self.io_errors,
            "lookup_rows_read": self.rows_read["lookup"],
            "ahead_rows_read": self.rows_read["ahead"],
            "lookup_read_seconds": self.read_seconds["lookup"],
            "ahead_read_seconds": self.read_seconds["ahead"],
            "handle_wait_seconds": self.handle_wait_seconds,
            "seeded_rows": self._seeder.rows if self._seeder else 0,
            "seed_seconds": self._seeder.seconds if self._seeder else 0.0,
        }
        if self._cache is not None:
            out.update(self._cache.stats())
        return {key: float(value) for key, value in out.items()}

    def wait_seeded(self, timeout: float | None = None) -> bool:
        """Block until the RAM cache's seeding ended (True at once without a seed)."""
        return self._seeder is None or self._seeder.wait(timeout)

    @property
    def disk_wait_seconds(self) -> float:
        """Seconds, cumulative, the reader spent in system calls waiting for the disk
        (benchmarks: a lookup's time beyond it is host work)."""
        return self._reader.wait_seconds

    @property
    def blocks_checked(self) -> int:
        """Blocks hashed against the manifest so far (at open and on first reads)."""
        return self._checks.checked

    @property
    def read_strategy(self) -> str:
        return self._reader.name

    def drop_page_cache(self) -> None:
        """Evict the data file from the page cache (benchmarks, tests)."""
        self._reader.drop_page_cache()

    def resident_fraction(self) -> float:
        """Share of the data file's pages in the page cache (mincore)."""
        return self._reader.resident_fraction()

    def verify(self, mode: str = "full") -> None:
        """Check the data file against the manifest's checksums now."""
        verify_table(self.directory, self.manifest, mode)

    def memory(self) -> dict[str, int]:
        held = self._bounce.nbytes + self._ahead.held_bytes()
        if self._cache is not None:
            held += self._cache.nbytes
        return {"ssd": self.manifest.data_bytes, "dram": held}

    def close(self) -> None:
        if self._seeder is not None:
            self._seeder.stop()  # NOTE: before the reader closes under it
        self._ahead.close()
        self._bounce.release()
        self._reader.close()
