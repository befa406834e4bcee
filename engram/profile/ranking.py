"""The one order of a profile's rows: the most counted first, ties by row id."""

from __future__ import annotations

import numpy as np


def top_rows(rows: np.ndarray, counts: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """(row ids, counts), int64, of the ``top`` most counted of the distinct ``rows``
    (``counts[i]`` for ``rows[i]``; rows counted 0 left out), the most first; ties by
    row id, also at the cut."""
    rows = np.asarray(rows, dtype=np.int64)
    hits = np.asarray(counts, dtype=np.int64)
    rows, hits = rows[hits > 0], hits[hits > 0]
    if rows.size > top:
        kth = np.partition(hits, rows.size - top)[rows.size - top]  # the top-th most
        above = np.flatnonzero(hits > kth)
        tied = np.flatnonzero(hits == kth)
        # NOTE: the lowest ids of the tied rows
        ties = tied[np.argsort(rows[tied], kind="stable")[: top - above.size]]
        keep = np.sort(np.r_[above, ties])
        rows, hits = rows[keep], hits[keep]
    order = np.lexsort((rows, -hits))
    return rows[order], hits[order]
