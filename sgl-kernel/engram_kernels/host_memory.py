"""Host tables the GPU reads over UVA: register, translate pointers, unregister.

``register_host_table(weight, scale, device=...)`` takes CPU tensors -- pinned by
torch (their device address is looked up, nothing is registered), or plain memory such
as :func:`alloc_host_buffer` or an mmap wrapped with ``torch.frombuffer`` (registered)
-- maps the memory behind them for device access and returns
a :class:`HostTable` whose ``weight`` / ``scale`` are :class:`DeviceView` s for
``gather_dequant``. It also checks huge pages (``hugepages.py``) and warns when they
back too little of the table.

On a CPU "device" (the Triton interpreter) nothing is registered: the device address
is the host address.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from engram_kernels.gpu_runtime import GpuRuntime, gpu_runtime
from engram_kernels.hugepages import (
    MIN_HUGE_FRACTION,
    HugePageCoverage,
    huge_page_coverage,
    warn_if_small_pages,
)
from engram_kernels.operands import DeviceView


@dataclass
class _Region:
    host: int
    nbytes: int
    device: int
    registered: bool  # False when it was page-locked already (not ours to unregister)


@dataclass
class HostTable:
    """A registered host table; ``close()`` (or ``unregister_host_table``) releases it."""

    weight: DeviceView
    scale: DeviceView
    device: torch.device
    coverage: HugePageCoverage
    regions: list[_Region]
    # The host tensors stay referenced so the memory outlives the registration.
    _keep: tuple[torch.Tensor, ...] = field(repr=False, default=())

    @property
    def closed(self) -> bool:
        return not self._keep

    def close(self) -> None:
        if self.closed:
            return
        if self.device.type != "cpu":
            torch.cuda.synchronize(self.device)  # lookups in flight still read the table
            runtime = gpu_runtime()
            for region in self.regions:
                if region.registered:
                    runtime.unregister(region.host)
        self.regions = []
        self._keep = ()


def register_host_table(
    weight: torch.Tensor,
    scale: torch.Tensor,
    *,
    device: torch.device | str,
    label: str = "Engram table",
    min_huge_fraction: float = MIN_HUGE_FRACTION,
) -> HostTable:
    """Map the host memory of ``weight`` [rows, D] and ``scale`` [rows, D/32] (separate
    tensors or column ranges of one packed tensor) for ``device``."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        # NOTE: ids moved with .to("cuda") land on "cuda:N"; an index-less device
        # would then fail the gather's same-device check.
        device = torch.device(device.type, torch.cuda.current_device())
    for name, t in (("weight", weight), ("scale", scale)):
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            raise ValueError(f"host table {name} must be a CPU tensor")
        if t.ndim != 2 or (t.shape[1] > 1 and t.stride(1) != 1):
            raise ValueError(f"host table {name} must be 2-D with contiguous rows")
    if weight.shape[0] != scale.shape[0]:
        raise ValueError(
            f"host table weight has {weight.shape[0]} rows but its scale has {scale.shape[0]}"
        )
    spans = _spans(weight, scale)
    coverage = _coverage(spans)
    warn_if_small_pages(coverage, label, min_huge_fraction)
    regions = [_map(host, nbytes, device, _read_only(host, nbytes)) for host, nbytes in spans]

    def view(t: torch.Tensor) -> DeviceView:
        region = next(r for r in regions if r.host <= t.data_ptr() < r.host + r.nbytes)
        ptr = region.device + (t.data_ptr() - region.host)
        return DeviceView(ptr, (t.shape[0], t.shape[1]), t.stride(0), device, t.dtype)

    return HostTable(view(weight), view(scale), device, coverage, regions, (weight, scale))


def unregister_host_table(table: HostTable) -> None:
    """Release ``table``'s registrations (idempotent)."""
    table.close()


def _spans(weight: torch.Tensor, scale: torch.Tensor) -> list[tuple[int, int]]:
    """The byte ranges to register: one per storage (a packed table has one)."""
    spans: dict[int, int] = {}
    for t in (weight, scale):
        storage = t.untyped_storage()
        spans[storage.data_ptr()] = storage.nbytes()
    return sorted(spans.items())


def _coverage(spans: list[tuple[int, int]]) -> HugePageCoverage:
    parts = [huge_page_coverage(host, nbytes) for host, nbytes in spans]
    huge = None if any(p.huge_bytes is None for p in parts) else sum(p.huge_bytes for p in parts)
    return HugePageCoverage(parts[0].start, sum(p.nbytes for p in parts), huge)


def _read_only(host: int, nbytes: int, maps: str = "/proc/self/maps") -> bool:
    """True when a mapping under ``[host, host + nbytes)`` is not writable (a read-only
    file mmap), which registration must be told."""
    end = host + nbytes
    try:
        text = Path(maps).read_text()
    except OSError:  # no procfs (some sandboxes): registration then assumes writable
        return False
    for line in text.splitlines():
        span, perms = line.split(maxsplit=2)[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if lo < end and host < hi and "w" not in perms:
            return True
    return False


def _map(host: int, nbytes: int, device: torch.device, read_only: bool) -> _Region:
    if device.type == "cpu":
        return _Region(host, nbytes, host, registered=False)
    if device.type != "cuda":
        raise ValueError(f"host tables map to a CUDA/ROCm device or the CPU, not {device}")
    torch.cuda.init()
    with torch.cuda.device(device):
        return map_region(gpu_runtime(), host, nbytes, read_only)


def map_region(runtime: GpuRuntime, host: int, nbytes: int, read_only: bool) -> _Region:
    """Map ``[host, host + nbytes)`` for the current device: look up the device address
    of memory already page-locked, register any other.

    NOTE: registering memory that is already page-locked (torch's ``pin_memory()``,
    ``cudaHostAlloc``) fails (``cudaErrorInvalidValue`` on an H200 with CUDA 13, or
    ``...HostMemoryAlreadyRegistered``); such memory is already mapped, and its device
    address is all a gather needs. Both ends of the span must be: a span only partly
    page-locked can be neither registered nor read.
    """
    first = runtime.mapped_pointer(host)
    last = runtime.mapped_pointer(host + nbytes - 1)
    if first is not None and last == first + nbytes - 1:
        return _Region(host, nbytes, first, registered=False)
    if first is not None or last is not None:
        raise RuntimeError(
            f"the host table's memory at {host:#x} ({nbytes:,} bytes) is only partly "
            "page-locked; pin all of it (one pin_memory() tensor) or none of it"
        )
    registered = runtime.register(host, nbytes, read_only=read_only)
    try:
        return _Region(host, nbytes, runtime.device_pointer(host), registered)
    except RuntimeError:
        if registered:
            runtime.unregister(host)
        raise
