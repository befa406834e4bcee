"""The baselines ``bench_lookup.py`` measures our SSD tier against, and its memory probe.

- :class:`NaivePath`: ids -> ``np.unique`` -> fancy index on an ``np.memmap`` -> copy
  (the public vLLM fork's SSD path);
- :class:`DramChild`: the table in anonymous memory of a child process (run as
  ``python lookup_baselines.py TABLE_DIR BATCHES``), gathered on request;
- :class:`AnonPeak`: this process's peak anonymous RSS (the table must never land there).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from engram.ssd.layout import DiskLayout


class NaivePath:
    """ids -> np.unique -> fancy index on an np.memmap -> copy into a staging tensor."""

    def __init__(self, data: Path, layout: DiskLayout):
        self.data, self.layout = data, layout
        self._blocks: np.ndarray | None = None

    def time(self, ids: np.ndarray) -> float:
        if self._blocks is None:
            layout = self.layout
            mapped = np.memmap(self.data, dtype=np.uint8, mode="r")
            self._blocks = np.lib.stride_tricks.as_strided(
                mapped,
                (layout.num_blocks, layout.rows_per_block, layout.row_bytes),
                (layout.block_bytes, layout.row_bytes, 1),
            )
        rpb = self.layout.rows_per_block
        start = time.perf_counter()
        unique, inverse = np.unique(ids, return_inverse=True)
        rows = self._blocks[unique // rpb, unique % rpb]
        staging = torch.empty((unique.size, self.layout.row_bytes), dtype=torch.uint8)
        staging.copy_(torch.from_numpy(rows))
        return time.perf_counter() - start

    def unmap(self) -> None:
        """Drop the mapping, so the page cache can really be emptied."""
        self._blocks = None


def dram_child(table_dir: Path, batches_file: Path) -> None:
    """Child process: the table in anonymous memory; times our CPU gather of the batch
    named on each stdin line ("prefill 3") and prints the seconds."""
    manifest = json.loads((table_dir / "manifest.json").read_text())
    layout = DiskLayout(manifest["num_rows"], manifest["head_dim"], manifest["chunk_blocks"])
    weight = torch.empty((layout.num_rows, layout.head_dim), dtype=torch.uint8)
    scale = torch.empty((layout.num_rows, layout.scale_dim), dtype=torch.uint8)
    used = layout.rows_per_block * layout.row_bytes
    with open(table_dir / "rows.bin", "rb") as f:
        for index in range(layout.num_chunks):
            first, count, nbytes = layout.chunk_span(index)
            raw = np.frombuffer(f.read(nbytes), dtype=np.uint8).reshape(-1, layout.block_bytes)
            rows = torch.from_numpy(raw[:, :used].reshape(-1, layout.row_bytes)[:count])
            weight[first : first + count] = rows[:, : layout.head_dim]
            scale[first : first + count] = rows[:, layout.head_dim :]
    batches = np.load(batches_file)
    print("ready", flush=True)
    for line in sys.stdin:
        kind, index = line.split()
        ids = batches[f"{kind}{index}"]
        start = time.perf_counter()
        unique, inverse = np.unique(ids, return_inverse=True)
        rows = torch.from_numpy(unique)
        weight.index_select(0, rows), scale.index_select(0, rows)
        print(time.perf_counter() - start, flush=True)


class DramChild:
    """The ``dram`` method, in its own process so its copy of the table stays out of ours."""

    def __init__(self, table_dir: Path, batches_file: Path):
        self._proc = subprocess.Popen(
            [sys.executable, __file__, str(table_dir), str(batches_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None and self._proc.stdout.readline().strip() == "ready"

    def time(self, kind: str, index: int) -> float:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{kind} {index}\n")
        self._proc.stdin.flush()
        return float(self._proc.stdout.readline())

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait()


# ---- memory ----------------------------------------------------------------------------


class AnonPeak:
    """Samples this process's anonymous RSS (the table must never land there)."""

    def __init__(self, every: float = 0.02):
        self.base = self.peak = _rss_anon()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            self.peak = max(self.peak, _rss_anon())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.peak, _rss_anon()) - self.base


def _rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    dram_child(Path(sys.argv[1]), Path(sys.argv[2]))
