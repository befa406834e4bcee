"""Merging profiles: the counts of profiles of one hash, summed row by row.

Profiles of the same hash identity (the same model and tokenizer) merge: each layer's
counts are summed per row, ranked again (:func:`~engram.profile.ranking.top_rows`) and
cut to ``top``. Typical inputs: the served profiles of several servers or restarts, a
TP group's shards (each holds its own rows), a corpus profile and a served one. A row an
input left out (below its own top) counts 0 there, so a merged count is at most the
true one. ``corpus`` counts (files, tokens, served rows) add up key by key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engram.errors import EngramInputError
from engram.profile.file import RowProfile
from engram.profile.ranking import top_rows


def merge_profiles(paths: Sequence[Path], top: int | None = None) -> RowProfile:
    """The profiles at ``paths`` summed; ``top`` rows per layer (default the largest
    ``top`` of the inputs). Refuses, naming the file and what differs, a profile of
    another hash than the first's."""
    profiles = [RowProfile.load(path) for path in paths]
    first = profiles[0]
    for path, profile in zip(paths[1:], profiles[1:], strict=True):
        why = profile.identity.mismatch(first.identity, other=str(paths[0]))
        if why is not None:
            raise EngramInputError(f"{path} cannot be merged with {paths[0]}: {why}")
    keep = top if top is not None else max(p.top for p in profiles)
    rows, counts = {}, {}
    for layer in first.identity.layers:
        ids = np.concatenate([p.rows[layer] for p in profiles])
        hits = np.concatenate([p.counts[layer] for p in profiles])
        order = np.argsort(ids, kind="stable")
        ids, hits = ids[order], hits[order]
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if ids.size else ids
        summed = np.add.reduceat(hits, starts) if ids.size else hits
        rows[layer], counts[layer] = top_rows(ids[starts], summed, keep)
    corpus: dict[str, int] = {}
    for profile in profiles:
        for key, value in profile.corpus.items():
            corpus[key] = corpus.get(key, 0) + int(value)
    return RowProfile(first.identity, keep, rows, counts, corpus)
