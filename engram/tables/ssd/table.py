"""``SsdTable``: the ``ssd`` placement's table, made of the parts of this package.

A lookup (:meth:`SsdTable.fetch`, the host half) dedups its row ids, takes what it can
from read-ahead handles done reading, then the RAM row cache, then handles still reading,
and reads the rest from the data file (:class:`~engram.tables.ssd.ram_front.RamFront`),
all into a bounce buffer (pinned on a GPU) that is copied to the device asynchronously
and dequantised there. An I/O error or a failed block check fails that one lookup
(:mod:`engram.tables.ssd.table_file`); both count as ``io_errors``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engram.errors import EngramTableError
from engram.placements import SSD
from engram.rows.read_ahead import ReadAhead, ReadAheadHandle
from engram.ssd.ensure import ensure_table, resolve_table_dir
from engram.ssd.integrity import verify_table
from engram.ssd.kernels import compile_kernels
from engram.ssd.manifest import TableManifest
from engram.ssd.row_cache import RowCache
from engram.ssd.sources import TensorRows
from engram.tables.base import EngramTable
from engram.tables.options import TableOptions
from engram.tables.ssd.host_lookup import Fetched, HostLookup
from engram.tables.ssd.ram_front import RamFront
from engram.tables.ssd.read_ahead_fill import fill_handle
from engram.tables.ssd.seeding import start_seeding
from engram.tables.ssd.stats import ssd_stats
from engram.tables.ssd.table_file import TableFile


class SsdTable(EngramTable):
    declaration = SSD
    options = frozenset(
        "path layer source read ram_cache_bytes read_ahead_bytes verify chunk_bytes seed".split()
    )

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
        self, directory: Path, manifest: TableManifest, options: TableOptions, *,
        check_blocks: bool = True,
    ):  # fmt: skip
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
        self.directory, self.manifest = directory, manifest
        file = TableFile(directory, manifest, options.read, self._checks if check_blocks else None)
        # NOTE: never larger than the table: a cache sized by the flag alone would hold
        # (and report) gigabytes for a megabyte table.
        cache_bytes = min(options.ram_cache_bytes, manifest.num_rows * self.row_bytes)
        self._front = RamFront(
            RowCache(cache_bytes, self.row_bytes) if cache_bytes > 0 else None, file
        )
        self._ahead = ReadAhead(
            lambda handle: fill_handle(handle, self._front, self._ahead, self.device),
            options.read_ahead_bytes,
        )
        self._host = HostLookup(
            self._front, self._ahead, self.row_bytes, self.device, self._check_ids
        )
        compile_kernels()  # NOTE: now, not on the first request (numba, cached on disk)
        self._seeder = start_seeding(options, self._front, self.num_rows, self.row_bytes)

    def fetch(self, ids: torch.Tensor) -> Fetched:
        """The host half of a lookup (:meth:`HostLookup.fetch`); the benchmark times this
        (the device copy and dequantisation follow in lookup)."""
        return self._host.fetch(ids)

    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, int]]:
        unique, inverse, values, from_ram = self._host.gather(ids, self.row_format.dequantize)
        out = values[torch.from_numpy(inverse).to(self.device)]
        # NOTE: rows read ahead were read from the SSD too (ahead of time).
        tiers = {"ssd": (unique.size - from_ram) * self.row_bytes}
        if from_ram:
            tiers["dram"] = from_ram * self.row_bytes
        return out, unique.size, tiers

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        # NOTE: from the file, past the RAM cache and its hit and miss counts.
        flat = ids.to("cpu", torch.int64).numpy()
        out = np.empty((flat.size, self.row_bytes), np.uint8)
        self._front.file.read(flat, out)
        return self.row_format.dequantize(torch.from_numpy(out).to(self.device))

    def read_ahead(self, row_ids: torch.Tensor, *, urgent: bool = False) -> ReadAheadHandle:
        """Start reading ``row_ids``' rows in the background; see :mod:`engram.rows.read_ahead`."""
        flat = row_ids.reshape(-1).to("cpu", torch.int64)
        self._check_ids(flat)
        return self._ahead.submit(flat.numpy().copy(), self.row_bytes, urgent=urgent)

    def stats(self) -> dict[str, float]:
        """The ssd table's own counters (:mod:`engram.tables.ssd.stats`)."""
        return ssd_stats(self._front, self._ahead, self._host, self._seeder)

    def wait_seeded(self, timeout: float | None = None) -> bool:
        """Block until the RAM cache's seeding ended (True at once without a seed)."""
        return self._seeder is None or self._seeder.wait(timeout)

    @property
    def disk_wait_seconds(self) -> float:
        """Seconds, cumulative, the reader spent in system calls waiting for the disk
        (benchmarks: a lookup's time beyond it is host work)."""
        return self._front.file.reader.wait_seconds

    @property
    def read_strategy(self) -> str:
        return self._front.file.reader.name

    def drop_page_cache(self) -> None:
        """Evict the data file from the page cache (benchmarks, tests)."""
        self._front.file.reader.drop_page_cache()

    def resident_fraction(self) -> float:
        """Share of the data file's pages in the page cache (mincore)."""
        return self._front.file.reader.resident_fraction()

    def refresh_residency(self) -> None:
        """Re-learn now which pages of the file the page cache holds (the mmap reader
        also does this continuously in the background)."""
        self._front.file.reader.refresh_residency()

    @property
    def blocks_checked(self) -> int:
        """Blocks hashed against the manifest so far (at open and on first reads)."""
        return self._checks.checked

    def verify(self, mode: str = "full") -> None:
        """Check the data file against the manifest's checksums now."""
        verify_table(self.directory, self.manifest, mode)

    def memory(self) -> dict[str, int]:
        held = self._host.bounce.nbytes + self._ahead.held_bytes()
        if self._front.cache is not None:
            held += self._front.cache.nbytes
        return {"ssd": self.manifest.data_bytes, "dram": held}

    def close(self) -> None:
        if self._seeder is not None:
            self._seeder.stop()  # NOTE: before the reader closes under it
        self._ahead.close()
        self._host.bounce.release()
        self._front.file.close()
