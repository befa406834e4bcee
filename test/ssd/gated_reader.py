"""A real pread reader whose reads on the read-ahead thread wait at a gate: a stand-in
for a slow disk, which a test cannot make on demand. Its handles stay "still reading"
for as long as the test holds the gate. Tests take it with the ``gated`` fixture
(every test module has it, from ``test/conftest.py``), which registers it as the read
strategy ``test-gated``."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from engram.ssd.readers import ALL_ROWS, READERS, register_reader
from engram.ssd.readers.pread import PreadReader


class GatedReader(PreadReader):
    name = "test-gated"
    entered = threading.Event()
    gate = threading.Event()
    ahead_reads: list[int] = []  # how many rows each read of the read-ahead thread asked for

    def read_rows(self, ids: np.ndarray, out: np.ndarray, at: np.ndarray = ALL_ROWS) -> None:
        if threading.current_thread().name == "engram-read-ahead":
            GatedReader.ahead_reads.append(ids.size)
            GatedReader.entered.set()
            GatedReader.gate.wait(timeout=60)
        super().read_rows(ids, out, at)


@pytest.fixture
def gated() -> Iterator[type[GatedReader]]:
    GatedReader.entered.clear()
    GatedReader.gate.clear()
    GatedReader.ahead_reads.clear()
    register_reader(GatedReader)
    yield GatedReader
    GatedReader.gate.set()
    del READERS[GatedReader.name]
