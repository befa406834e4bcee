"""Engram tables of a chosen size filled with the trained tiny model's rows
(``build --text-backbone``).

A larger table hashes with other primes, so a trained row's n-grams land in other
buckets of it. Every bucket of the larger table that an n-gram of the training text
reaches copies the trained row that the same n-gram reaches in the trained table (of
the n-grams sharing one larger bucket, the most frequent decides); every other bucket
copies a pseudo-random trained row, as an unseen n-gram in the trained table lands on
some trained row. Both tables hash one token stream with the same multipliers, so
pairing their row ids per token and hash column is all it takes: the trained model then
reads, for the n-grams of text, the rows it was trained with, and its Engram layers help
it as they did (``test_text_backbone.py``).

The rows are written chunk by chunk (:data:`CHUNK_ROWS` rows, one generator per chunk,
seeded from the layer and the chunk), so a table of many GiB is never whole in memory
and the same inputs give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engram.hashing import NO_TOKEN, NgramHasher
from engram.model.large_tables import CHUNK_ROWS

# NOTE: tokens per hash call, as engram.profile's counting: ids and temporaries ~100 MiB.
HASH_TOKENS = 1 << 18
# NOTE: pending (row pair, count) entries summed into one sorted set past this many.
REDUCE_PAIRS = 1 << 24
SEED = 0


@dataclass(frozen=True)
class RowSources:
    """Per Engram layer: the larger table's rows that text reaches (sorted) and, for
    each, the trained row it copies."""

    rows: tuple[np.ndarray, ...]
    trained: tuple[np.ndarray, ...]

    def mapped(self, index: int) -> int:
        """Rows of layer ``index``'s larger table that copy a row for their n-grams."""
        return int(self.rows[index].size)


class _PairCounts:
    """How often each (larger row, trained row) pair occurs, for one layer."""

    def __init__(self, trained_rows: int):
        self.trained_rows = trained_rows
        self.codes: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.pending = 0

    def add(self, large: np.ndarray, trained: np.ndarray) -> None:
        codes, counts = np.unique(large * self.trained_rows + trained, return_counts=True)
        self.codes.append(codes)
        self.counts.append(counts.astype(np.int64))
        self.pending += codes.size
        if self.pending > REDUCE_PAIRS:
            self._reduce()

    def _reduce(self) -> None:
        codes, inverse = np.unique(np.concatenate(self.codes), return_inverse=True)
        counts = np.bincount(inverse, weights=np.concatenate(self.counts)).astype(np.int64)
        self.codes, self.counts, self.pending = [codes], [counts], codes.size

    def most_frequent(self) -> tuple[np.ndarray, np.ndarray]:
        """Each larger row reached (ascending) and its most frequent trained row (ties:
        the lowest id)."""
        if not self.codes:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        self._reduce()
        large, trained = np.divmod(self.codes[0], self.trained_rows)
        # NOTE: codes are sorted, so each larger row's pairs are adjacent, trained ids
        # ascending; a stable sort by count (descending) within a row keeps that order.
        order = np.lexsort((-self.counts[0], large))
        large, trained = large[order], trained[order]
        first = np.ones(large.size, dtype=bool)
        first[1:] = large[1:] != large[:-1]
        return large[first], trained[first]


def pair_rows(
    trained: NgramHasher,
    large: NgramHasher,
    documents: Sequence[Sequence[int]],
    trained_rows: Sequence[int],
) -> RowSources:
    """The :class:`RowSources` of ``documents`` (token ids, each hashed from its start)
    through the trained table's hash and the larger table's; ``trained_rows``: the
    trained tables' row counts."""
    layers = len(trained_rows)
    pairs = [_PairCounts(n) for n in trained_rows]
    for flat, lens in _batches(documents):
        histories = torch.full((lens.numel(), trained.window - 1), NO_TOKEN, dtype=torch.int64)
        small = trained.hash_batch(flat, lens, histories)
        big = large.hash_batch(flat, lens, histories)
        for i in range(layers):
            pairs[i].add(big[:, i].reshape(-1).numpy(), small[:, i].reshape(-1).numpy())
    found = [p.most_frequent() for p in pairs]
    return RowSources(tuple(f[0] for f in found), tuple(f[1] for f in found))


def _batches(documents: Sequence[Sequence[int]]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Whole documents back to back, about :data:`HASH_TOKENS` tokens per batch."""
    group: list[Sequence[int]] = []
    tokens = 0
    for doc in documents:
        if not len(doc):
            continue
        group.append(doc)
        tokens += len(doc)
        if tokens >= HASH_TOKENS:
            yield _flat(group)
            group, tokens = [], 0
    if group:
        yield _flat(group)


def _flat(group: list[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    flat = torch.from_numpy(np.concatenate([np.asarray(d, dtype=np.int64) for d in group]))
    return flat, torch.tensor([len(d) for d in group], dtype=torch.int64)


def chunk_sources(
    sources: RowSources, index: int, layer: int, trained_rows: int, chunk: int, num_rows: int
) -> np.ndarray:
    """The trained row each row of chunk ``chunk`` of layer ``index`` (layer id
    ``layer``) copies; the table has ``num_rows`` rows."""
    start = chunk * CHUNK_ROWS
    rows = min(CHUNK_ROWS, num_rows - start)
    rng = np.random.default_rng((SEED, layer, chunk))
    out = rng.integers(0, trained_rows, size=rows, dtype=np.int64)
    mapped = sources.rows[index]
    lo, hi = np.searchsorted(mapped, [start, start + rows])
    out[mapped[lo:hi] - start] = sources.trained[index][lo:hi]
    return out


def row_chunks(
    sources: RowSources, index: int, layer: int, trained: np.ndarray, num_rows: int
) -> Iterator[np.ndarray]:
    """The bytes of one larger table's tensor (``trained``: the trained table's
    ``[rows, width]`` bytes, its e4m3 rows or their ue8m0 scales), chunk by chunk."""
    for chunk in range(-(-num_rows // CHUNK_ROWS)):
        src = chunk_sources(sources, index, layer, trained.shape[0], chunk, num_rows)
        yield trained[src].reshape(-1)
