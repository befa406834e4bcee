"""Huge pages for host tables: allocate with them, and check how much they back.

A GPU reading a host table over UVA translates every address through the IOMMU /
host page tables; with 4 KiB pages nearly every random row misses and lookups get
~10x slower. Tables should sit on 2 MiB (THP) or hugetlbfs pages.
"""

from __future__ import annotations

import logging
import mmap
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

HUGE_PAGE = 2 << 20
MIN_HUGE_FRACTION = 0.9
# smaps fields counting bytes mapped by PMD-sized (huge) pages.
_HUGE_FIELDS = ("AnonHugePages", "ShmemPmdMapped", "FilePmdMapped")

FIX_HINT = (
    "enable transparent huge pages (echo madvise > /sys/kernel/mm/transparent_hugepage/"
    "enabled, or 'always'; for shared-memory tables also .../shmem_enabled = advise), "
    "or back the table with hugetlbfs (vm.nr_hugepages); in containers this is the "
    "host's setting, and /dev/shm needs --shm-size large enough for the table"
)


@dataclass(frozen=True)
class HugePageCoverage:
    """How many bytes of ``[start, start + nbytes)`` huge pages back (``None``: unknown,
    the process cannot read its smaps)."""

    start: int
    nbytes: int
    huge_bytes: int | None

    @property
    def fraction(self) -> float | None:
        if self.huge_bytes is None:
            return None
        return self.huge_bytes / self.nbytes if self.nbytes else 1.0


def huge_page_coverage(
    start: int, nbytes: int, smaps: str | Path = "/proc/self/smaps"
) -> HugePageCoverage:
    """Read ``smaps`` for the mappings overlapping the range. hugetlbfs mappings count
    whole; for THP the mapping's huge bytes are shared out by overlap (exact when the
    range is the whole mapping, as for :func:`alloc_host_buffer`)."""
    end = start + nbytes
    huge = 0.0
    vma: tuple[int, int] | None = None
    fields: dict[str, int] = {}

    def close_vma() -> None:
        nonlocal huge
        if vma is None:
            return
        lo, hi = max(vma[0], start), min(vma[1], end)
        if hi <= lo:
            return
        size = vma[1] - vma[0]
        if fields.get("KernelPageSize", 4) > 4:
            huge += hi - lo
        else:
            thp = sum(fields.get(name, 0) for name in _HUGE_FIELDS) * 1024
            huge += min(hi - lo, thp * (hi - lo) / size)

    try:
        text = Path(smaps).read_text()
    except OSError:
        return HugePageCoverage(start, nbytes, None)
    for line in text.splitlines():
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and not head.endswith(":"):
            close_vma()
            lo, hi = head.split("-")
            vma, fields = (int(lo, 16), int(hi, 16)), {}
        elif head.endswith(":") and vma is not None:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[head[:-1]] = int(parts[1])
    close_vma()
    return HugePageCoverage(start, nbytes, int(huge))


def warn_if_small_pages(
    coverage: HugePageCoverage, label: str, threshold: float = MIN_HUGE_FRACTION
) -> str | None:
    """Log (and return) a warning when huge pages back less than ``threshold``."""
    if coverage.fraction is None:
        message = f"{label}: cannot read /proc/self/smaps, so huge-page coverage is unknown"
        log.info(message)
        return message
    if coverage.fraction >= threshold:
        return None
    message = (
        f"{label}: huge pages back only {coverage.fraction:.0%} of its "
        f"{_size(coverage.nbytes)} host table (want >= {threshold:.0%}); GPU "
        f"lookups over UVA get ~10x slower. Fix: {FIX_HINT}"
    )
    log.warning(message)
    return message


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def alloc_host_buffer(nbytes: int) -> torch.Tensor:
    """A uint8 [nbytes] CPU tensor on fresh anonymous memory, 2 MiB aligned and advised
    for transparent huge pages. It stays mapped while any view of it is alive."""
    if nbytes <= 0:
        raise ValueError(f"host buffer size must be positive, got {nbytes}")
    # NOTE: THP needs 2 MiB-aligned extents; over-allocate and start at an aligned byte.
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = torch.frombuffer(region, dtype=torch.uint8)
    offset = -whole.data_ptr() % HUGE_PAGE
    if hasattr(mmap, "MADV_HUGEPAGE"):
        length = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
        region.madvise(mmap.MADV_HUGEPAGE, offset, length)
    return whole[offset : offset + nbytes]
