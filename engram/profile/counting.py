"""Counting which rows of each Engram (or PLE) table a corpus looks up, through the
model's hash.

Texts are tokenised in groups (``encode_batch``, the tokenizer's threads), their token
ids laid back to back and hashed :data:`HASH_TOKENS` tokens at a time by the hasher's
``hash_batch`` (each document hashed from its start, as a prompt is: a
batch that starts inside a document carries its last ``N - 1`` tokens as history), and
each layer's row ids counted into a dense per-row array.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from engram.hashing import NO_TOKEN, NgramHasher
from engram.ple_hashing import PleRowHasher
from engram.profile.ranking import top_rows

# NOTE: what counting needs of a hash: ``window`` and ``hash_batch`` (both kinds have them)
BatchHasher = NgramHasher | PleRowHasher

# NOTE: tokens per hash call: [T, layers, columns] int64 ids and the hasher's temporaries
# stay near 100 MiB for DeepSeek-V4.1's 2 x 24 columns.
HASH_TOKENS = 1 << 18


class RowCounts:
    """Hits per row of each layer's table. Counts are uint32: a row looked up more than
    4 billion times needs a corpus of far more tokens than a profile is made from, and
    DeepSeek-V4.1's 384 M rows then take 1.5 GiB per table."""

    def __init__(self, hasher: BatchHasher, table_rows: Sequence[int]):
        self.hasher = hasher
        self.counts = [np.zeros(n, dtype=np.uint32) for n in table_rows]
        self.tokens = 0

    def add(self, documents: Sequence[Sequence[int]]) -> None:
        """Count the rows the token ids of ``documents`` look up (each hashed from its start)."""
        docs = [np.asarray(d, dtype=np.int64) for d in documents if len(d)]
        if not docs:
            return
        flat = np.concatenate(docs)
        starts = np.cumsum([0] + [d.size for d in docs[:-1]])
        for begin in range(0, flat.size, HASH_TOKENS):
            self._count(flat, starts, begin, min(begin + HASH_TOKENS, flat.size))
        self.tokens += flat.size

    def _count(self, flat: np.ndarray, starts: np.ndarray, begin: int, end: int) -> None:
        inside = starts[(starts > begin) & (starts < end)]
        bounds = np.r_[begin, inside, end]
        n1 = self.hasher.window - 1
        histories = np.full((bounds.size - 1, n1), NO_TOKEN, dtype=np.int64)
        # NOTE: only the first piece can start inside a document, after its start
        doc_start = starts[np.searchsorted(starts, begin, side="right") - 1]
        before = flat[max(doc_start, begin - n1) : begin]
        if before.size:
            histories[0, n1 - before.size :] = before
        rows = self.hasher.hash_batch(
            torch.from_numpy(flat[begin:end]),
            torch.from_numpy(np.diff(bounds)),
            torch.from_numpy(histories),
        )
        for i, counts in enumerate(self.counts):
            ids = rows[:, i, :].reshape(-1).numpy()
            if counts.size <= 4 * ids.size:
                np.add(
                    counts, np.bincount(ids, minlength=counts.size), out=counts, casting="unsafe"
                )
            else:  # NOTE: a table far larger than the batch: count only the rows it hit
                hit, times = np.unique(ids, return_counts=True)
                counts[hit] += times.astype(np.uint32)

    def ranked(self, index: int, top: int) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, counts) of the ``top`` most looked-up rows of table ``index`` (rows
        never looked up left out), the most first; ties by row id, also at the cut."""
        rows = np.flatnonzero(self.counts[index])
        return top_rows(rows, self.counts[index][rows], top)
