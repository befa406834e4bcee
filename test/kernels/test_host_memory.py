"""Host tables: huge-page buffers, coverage checks, registration, reads through views."""

from __future__ import annotations

import logging
import mmap
from pathlib import Path

import numpy as np
import pytest
import torch
from engram_kernels import (
    INTERPRET,
    alloc_host_buffer,
    gather_dequant,
    huge_page_coverage,
    register_host_table,
    unregister_host_table,
    warn_if_small_pages,
)
from engram_kernels.gpu_runtime import GpuRuntime, loaded_library, runtime_api
from engram_kernels.host_memory import _read_only, map_region
from engram_kernels.hugepages import HUGE_PAGE

from engram.fp8 import pack_rows
from test.kernels.tables import random_table, reference, same_bits

SMAPS = """\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
KernelPageSize:        4 kB
AnonHugePages:      2048 kB
VmFlags: rd wr mr mw me ac hg
7f0000400000-7f0000800000 rw-s 00000000 00:0f 123                        /dev/hugepages/t
Size:               4096 kB
KernelPageSize:     2048 kB
AnonHugePages:         0 kB
7f0000800000-7f0000c00000 rw-p 00000000 00:00 0
Size:               4096 kB
KernelPageSize:        4 kB
AnonHugePages:         0 kB
"""


def test_coverage_reads_thp_and_hugetlbfs_mappings(tmp_path: Path) -> None:
    smaps = tmp_path / "smaps"
    smaps.write_text(SMAPS)
    base, mib = 0x7F0000000000, 1 << 20
    # All three mappings: 2 MiB of THP + 4 MiB hugetlbfs out of 12 MiB.
    assert huge_page_coverage(base, 12 * mib, smaps).huge_bytes == 6 * mib
    # Half of the THP mapping: its huge bytes are shared out by overlap.
    assert huge_page_coverage(base + 2 * mib, 2 * mib, smaps).huge_bytes == mib
    whole = huge_page_coverage(base + 4 * mib, 4 * mib, smaps)
    assert whole.fraction == 1.0
    assert huge_page_coverage(base + 8 * mib, 4 * mib, smaps).fraction == 0.0


def test_small_pages_are_reported_with_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    region = mmap.mmap(-1, 264 * 16384)
    region.madvise(mmap.MADV_NOHUGEPAGE)
    table = torch.frombuffer(region, dtype=torch.uint8).view(-1, 264)
    table.fill_(1)  # fault the pages in
    with caplog.at_level(logging.WARNING, logger="engram_kernels.hugepages"):
        handle = register_host_table(table[:, :256], table[:, 256:], device="cpu", label="L1")
    assert handle.coverage.huge_bytes == 0 and handle.coverage.nbytes == len(region)
    assert "L1: huge pages back only 0%" in caplog.text
    assert "transparent_hugepage" in caplog.text and "10x slower" in caplog.text
    handle.close()


def vm_flags(address: int) -> list[str]:
    """The kernel's flags of the mapping holding ``address`` (smaps ``VmFlags``)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_alloc_host_buffer_is_aligned_and_advised() -> None:
    buf = alloc_host_buffer(3 * HUGE_PAGE + 100)
    assert buf.numel() == 3 * HUGE_PAGE + 100 and buf.data_ptr() % HUGE_PAGE == 0
    buf.fill_(7)
    assert "hg" in vm_flags(buf.data_ptr())  # MADV_HUGEPAGE took effect
    assert "hg" in vm_flags(buf.data_ptr() + buf.numel() - 1)


def test_read_only_mappings_are_detected(tmp_path: Path) -> None:
    path = tmp_path / "rows.bin"
    path.write_bytes(bytes(range(256)) * 64)
    with path.open("rb") as f:
        ro = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    rw = mmap.mmap(-1, 1 << 16)
    assert _read_only(np.frombuffer(ro, dtype=np.uint8).ctypes.data, 1 << 14)
    assert not _read_only(np.frombuffer(rw, dtype=np.uint8).ctypes.data, 1 << 16)


@pytest.mark.skipif(not INTERPRET, reason="on a GPU: test_uva_rows_equal_hbm_rows")
def test_host_views_read_like_the_tensors() -> None:
    weight, scale = random_table(500, 256)
    packed = alloc_host_buffer(500 * 264).view(500, 264)
    packed.copy_(pack_rows(weight, scale))
    handle = register_host_table(packed[:, :256], packed[:, 256:], device="cpu")
    assert handle.weight.ptr == packed.data_ptr() and handle.scale.row_stride == 264
    ids = torch.randint(0, 500, (9, 48))
    for dedup in (False, True):
        assert same_bits(gather_dequant(handle.weight, handle.scale, ids, dedup=dedup),
                         reference(weight, scale, ids))  # fmt: skip
    unregister_host_table(handle)
    assert handle.closed
    unregister_host_table(handle)  # idempotent


def test_mismatched_host_arrays_are_named() -> None:
    weight, scale = random_table(10, 64)
    with pytest.raises(ValueError, match="10 rows but its scale has 9"):
        register_host_table(weight, scale[:9], device="cpu")
    with pytest.raises(ValueError, match="must be a CPU tensor"):
        register_host_table(weight.to("meta"), scale, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the runtime's error path")
@pytest.mark.skipif(not (torch.version.cuda or torch.version.hip), reason="CPU-only torch")
def test_runtime_errors_are_named_without_a_device() -> None:
    library = loaded_library(runtime_api())
    assert library is not None, "torch's GPU build maps its runtime library"
    runtime = GpuRuntime(runtime_api(), library)
    buf = alloc_host_buffer(HUGE_PAGE)
    with pytest.raises(
        RuntimeError,
        match=rf"{runtime_api()}HostRegister of 2,097,152 bytes .* failed: \w+Error\w+",
    ):
        runtime.register(buf.data_ptr(), buf.numel(), read_only=False)


@pytest.mark.gpu
@pytest.mark.parametrize("pinned_by_torch", [False, True])
def test_uva_rows_equal_hbm_rows(pinned_by_torch: bool) -> None:
    device = torch.device("cuda")
    weight, scale = random_table(4096, 256)
    if pinned_by_torch:
        host_w, host_s = weight.pin_memory(), scale.pin_memory()
    else:
        packed = alloc_host_buffer(4096 * 264).view(4096, 264)
        packed.copy_(pack_rows(weight, scale))
        host_w, host_s = packed[:, :256], packed[:, 256:]
    handle = register_host_table(host_w, host_s, device=device)
    assert all(r.registered != pinned_by_torch for r in handle.regions)
    ids = torch.randint(0, 4096, (64, 48), device=device)
    hbm_w, hbm_s = weight.to(device), scale.to(device)
    for dedup in (False, True):
        uva = gather_dequant(handle.weight, handle.scale, ids, dedup=dedup)
        assert same_bits(uva, gather_dequant(hbm_w, hbm_s, ids, dedup=dedup))
    assert same_bits(uva, reference(weight, scale, ids.cpu()))
    handle.close()
    assert handle.closed


class FakeRuntime:
    """A GPU runtime's view of host memory: page-locked spans at device addresses."""

    api = "cuda"
    OFFSET = 1 << 40  # device address - host address

    def __init__(self, locked: dict[int, int]):
        self.locked = dict(locked)  # host start -> bytes
        self.calls: list[str] = []

    def mapped_pointer(self, ptr: int) -> int | None:
        hit = any(lo <= ptr < lo + n for lo, n in self.locked.items())
        return ptr + self.OFFSET if hit else None

    def register(self, ptr: int, nbytes: int, *, read_only: bool) -> bool:
        self.calls.append("register")
        if self.mapped_pointer(ptr) is not None:  # what CUDA 13 said on an H200
            raise RuntimeError("cudaHostRegister failed: cudaErrorInvalidValue")
        self.locked[ptr] = nbytes
        return True

    def device_pointer(self, ptr: int) -> int:
        device = self.mapped_pointer(ptr)
        assert device is not None
        return device

    def unregister(self, ptr: int) -> None:
        self.calls.append("unregister")
        del self.locked[ptr]


def test_memory_pinned_by_the_caller_is_looked_up_not_registered() -> None:
    base = 0x7F0000000000
    runtime = FakeRuntime({base - 4096: 1 << 20})  # a pinned block holding the table
    region = map_region(runtime, base, 4096 * 10, read_only=False)
    assert (region.device, region.registered) == (base + FakeRuntime.OFFSET, False)
    assert runtime.calls == []
    plain = map_region(runtime, base + (2 << 20), 4096, read_only=False)
    assert plain.registered and runtime.calls == ["register"]
    with pytest.raises(RuntimeError, match="only partly page-locked"):
        map_region(runtime, base + (1 << 20) - 8192, 1 << 20, read_only=False)


def test_unreadable_smaps_means_unknown_coverage(tmp_path: Path) -> None:
    coverage = huge_page_coverage(0x7F0000000000, 1 << 20, tmp_path / "no-procfs")
    assert coverage.huge_bytes is None and coverage.fraction is None
    assert "coverage is unknown" in warn_if_small_pages(coverage, "L3")
