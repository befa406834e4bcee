"""Writing the profile of what a server served: its tables' own row counts, kept current.

A :class:`ProfileUpkeep` owns one output file. Each served table it is given counts its
lookups into a :class:`~engram.profile.tally.RowTally`; a thread folds the tallies about
once a second and writes the profile (:class:`~engram.profile.file.RowProfile`, the
format ``python -m engram.profile`` writes, with the served model's hash identity) when
the counts changed and either the lookups stopped :data:`SETTLE_S` ago or the last write
is :data:`WRITE_EVERY_S` old, and once more at :meth:`~ProfileUpkeep.close`. Every write
is atomic (a temporary file renamed over the old one), so a reader or a kill mid-write
finds the previous profile or the new one whole.

A table's rows are written as rows of the whole layer (its ``row_start`` added), so the
profiles of a TP group's shards, each written by its own process, merge into the
layer's (``python -m engram.profile merge``); :func:`rank_path` names each rank's file. The header's ``corpus`` says
``served_rows`` (ids counted) and ``dropped_counts`` (counts a full tally let go).

Whoever makes an upkeep closes it (the plugin: at interpreter exit and on SIGTERM,
``sglang_engram.tables.profile_out``). A SIGKILL loses what came after the last write:
at most :data:`WRITE_EVERY_S` of traffic.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np

from engram.profile.file import RowProfile
from engram.profile.identity import HashIdentity
from engram.profile.make import DEFAULT_TOP
from engram.profile.ranking import top_rows
from engram.profile.tally import RowTally

logger = logging.getLogger(__name__)

# NOTE: under steady traffic, how old the file may get (what a SIGKILL can lose); a
# write of 1 M rows per table takes a fraction of a second on the writer's thread.
WRITE_EVERY_S = 60.0
SETTLE_S = 2.0  # written this long after the lookups stop: current while the server idles
FOLD_EVERY_S = 1.0


class ProfileUpkeep:
    """The served profile at ``path`` of the tables of the model whose hash is
    ``identity``, the ``top`` most looked-up rows per layer."""

    def __init__(
        self,
        path: str | Path,
        identity: HashIdentity,
        *,
        top: int = DEFAULT_TOP,
        every_s: float = WRITE_EVERY_S,
        settle_s: float = SETTLE_S,
        fold_s: float = FOLD_EVERY_S,
    ):
        self.path, self.identity, self.top = Path(path), identity, top
        self.every_s, self.settle_s, self.fold_s = every_s, settle_s, fold_s
        self.writes = 0
        self._tallies: dict[int, list[tuple[int, RowTally]]] = {}
        # NOTE: re-entrant: the SIGTERM handler writes on the main thread, which may be
        # inside a registration when the signal comes.
        self._lock = threading.RLock()
        self._written = 0  # ids counted at the last write
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engram-profile-out", daemon=True)
        self._thread.start()

    def tally(self, layer: int, row_start: int, num_rows: int) -> RowTally:
        """A new tally for a table of ``num_rows`` rows of layer ``layer``'s table from
        row ``row_start`` (a TP shard's; 0 for a whole table), written with the others."""
        self.identity.table(layer)  # NOTE: raises naming the layers the hash has
        tally = RowTally(num_rows, capacity=4 * self.top)
        with self._lock:
            self._tallies.setdefault(layer, []).append((row_start, tally))
        return tally

    def write(self) -> bool:
        """Write the profile now if the counts changed since the last write; True if it did."""
        with self._lock:
            tallies = [t for shards in self._tallies.values() for _, t in shards]
            for tally in tallies:
                tally.fold()
            counted = sum(t.counted for t in tallies)
            if counted == self._written:
                return False
            self.profile().save(self.path)
            self._written = counted
            self.writes += 1
            if self.writes == 1:
                logger.info("served profile: first written to %s", self.path)
            return True

    def profile(self) -> RowProfile:
        """The profile of the counts folded so far."""
        rows, counts = {}, {}
        with self._lock:
            for table in self.identity.tables:
                shards = [(start, *t.snapshot()) for start, t in self._tallies.get(table.layer, [])]
                ids = np.concatenate(
                    [r + start for start, r, _ in shards] or [np.empty(0, np.int64)]
                )
                hits = np.concatenate([c for _, _, c in shards] or [np.empty(0, np.int64)])
                rows[table.layer], counts[table.layer] = top_rows(ids, hits, self.top)
            tallies = [t for shards in self._tallies.values() for _, t in shards]
        served = {
            "served_rows": sum(t.counted for t in tallies),
            "dropped_counts": sum(t.dropped for t in tallies),
        }
        return RowProfile(self.identity, self.top, rows, counts, served)

    def close(self) -> None:
        """Stop the thread and write what is left (again: only what came since)."""
        closing = not self._stop.is_set()
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        if self.write() or (closing and self.writes):
            logger.info("served profile: %s written (%d times)", self.path, self.writes)

    def _run(self) -> None:
        last_write = last_change = time.monotonic()
        while not self._stop.wait(self.fold_s):
            if sum(t.fold() for shards in list(self._tallies.values()) for _, t in shards):
                last_change = time.monotonic()
            now = time.monotonic()
            if now - last_change >= self.settle_s or now - last_write >= self.every_s:
                try:
                    if self.write():
                        last_write = now
                except OSError as err:  # NOTE: a full disk: said, and tried again later
                    logger.warning("served profile: writing %s failed: %s", self.path, err)
                    last_write = now


def rank_path(path: str | Path, suffix: str) -> Path:
    """The file one rank of a deployment writes: ``path`` with ``suffix`` (a TP shard's
    ``.tp0of2``, a DP rank's ``.dp1``) before its extension."""
    path = Path(path)
    return path.with_name(path.stem + suffix + path.suffix) if suffix else path
