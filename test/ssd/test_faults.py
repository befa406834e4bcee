"""I/O errors fail one lookup and the table keeps serving; readers report a shrunken
file as an error, never as a SIGBUS."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from engram.ssd.faults import EngramIOError, PageReadError
from engram.ssd.layout import DiskLayout
from engram.ssd.readers import ALL_ROWS, READERS, register_reader
from engram.ssd.readers.direct import DirectReader
from engram.ssd.readers.mapped import MappedReader
from engram.ssd.readers.pread import PreadReader
from engram.tables import create_table
from test.ssd.helpers import REPO, random_table

ROWS, DIM = 30_000, 256


class FailingDiskReader(MappedReader):
    """Stand-in for failing hardware (a CI machine has no disk we can make fail): the
    next ``failures_left`` reads raise EIO the way a bad sector does."""

    name = "test-failing-disk"
    failures_left = 0

    def read_rows(self, ids: np.ndarray, out: np.ndarray, at: np.ndarray = ALL_ROWS) -> None:
        if FailingDiskReader.failures_left:
            FailingDiskReader.failures_left -= 1
            first = int(ids[0]) // self.layout.rows_per_block
            raise PageReadError(errno.EIO, self.path, first, 1, "reading")
        super().read_rows(ids, out, at)


@pytest.fixture
def failing_disk() -> Iterator[type[FailingDiskReader]]:
    register_reader(FailingDiskReader)
    yield FailingDiskReader
    FailingDiskReader.failures_left = 0
    del READERS[FailingDiskReader.name]


def test_io_error_fails_only_that_lookup(
    tmp_path: Path, failing_disk: type[FailingDiskReader]
) -> None:
    weight, scale = random_table(ROWS, DIM)
    dram = create_table("dram", weight, scale)
    table = create_table("ssd", weight, scale, path=tmp_path / "t", read=failing_disk.name)
    ids = torch.randint(0, ROWS, (64, 48))
    failing_disk.failures_left = 1
    with pytest.raises(EngramIOError) as caught:
        table.lookup(ids)
    message = str(caught.value)
    assert f"SSD table {tmp_path / 't'}" in message
    assert "Input/output error reading pages" in message and "Only this lookup failed" in message
    assert table.stats()["io_errors"] == 1
    for _ in range(2):  # the next lookups succeed, bit-identical
        ids = torch.randint(0, ROWS, (64, 48))
        assert torch.equal(table.lookup(ids), dram.lookup(ids))
    table.close()


def _run_child(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a child: were the error a SIGBUS, the child (not pytest) dies."""
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, f"child died ({run.returncode}): {run.stderr}"
    return run


def test_mmap_reader_reports_a_shrunken_file_as_an_error(tmp_path: Path) -> None:
    weight, scale = random_table(ROWS, DIM)
    create_table("ssd", weight, scale, path=tmp_path / "t").close()
    path = tmp_path / "t" / "rows.bin"
    run = _run_child(f"""
import os, pathlib, numpy as np, torch
from engram.ssd.faults import PageReadError
from engram.ssd.layout import DiskLayout
from engram.ssd.readers.direct import DirectReader
from engram.ssd.readers.mapped import MappedReader
layout = DiskLayout({ROWS}, {DIM})
reader = MappedReader(pathlib.Path({str(path)!r}), layout)
reader.refresh_residency()  # the whole file is in the page cache and known to be
os.truncate({str(path)!r}, layout.file_bytes // 2)
try:
    reader.read_rows(np.array([{ROWS} - 1]), torch.empty((1, layout.row_bytes), dtype=torch.uint8))
except PageReadError as err:
    print("ERROR", err)
""")
    assert f"the file shrank to {DiskLayout(ROWS, DIM).file_bytes // 2:,} bytes" in run.stdout
    assert str(path) in run.stdout


def test_populate_read_returns_efault_where_an_access_would_sigbus(tmp_path: Path) -> None:
    # The cold path's safety net: MADV_POPULATE_READ on pages past the end of the file
    # fails with EFAULT (as it does for a disk error) instead of raising SIGBUS.
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    run = _run_child(f"""
import mmap, os, numpy as np
from engram.ssd.sysmem import MADV_POPULATE_READ, AdviceError, RangeAdvisor
fd = os.open({str(path)!r}, os.O_RDONLY)
mm = mmap.mmap(fd, 1 << 20, access=mmap.ACCESS_READ)
base = np.frombuffer(mm, dtype=np.uint8).ctypes.data
os.truncate({str(path)!r}, 1 << 19)
iov = np.array([[base, 4096], [base + (3 << 18), 4096]], dtype=np.uint64)
try:
    RangeAdvisor().advise(iov, MADV_POPULATE_READ)
except AdviceError as err:
    print("ERROR", err.errno, err.index)
""")
    assert run.stdout.strip() == f"ERROR {errno.EFAULT} 1"


@pytest.mark.parametrize("reader_class", [PreadReader, DirectReader])
def test_pread_and_direct_readers_report_a_short_read(tmp_path: Path, reader_class) -> None:
    weight, scale = random_table(ROWS, DIM)
    create_table("ssd", weight, scale, path=tmp_path / "t").close()
    layout = DiskLayout(ROWS, DIM)
    path = tmp_path / "t" / "rows.bin"
    reader = reader_class(path, layout)
    os.truncate(path, layout.file_bytes // 2)
    out = torch.empty((1, layout.row_bytes), dtype=torch.uint8)
    with pytest.raises(
        PageReadError, match=rf"short read: 0 of 4096 bytes\) pages [\d,]+\.\.[\d,]+ of {path}"
    ):
        reader.read_rows(np.array([ROWS - 1]), out)
    reader.close()
