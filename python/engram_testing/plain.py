"""Plain computations of what the core library computes fast, for the tests to check it
against (none is on a serving path): where rows sit in an SSD table's file, the
histories a chunked prefill carries from chunk to chunk, and a model's tables' size."""

from __future__ import annotations

import numpy as np
import torch

from engram.spec import EngramSpec
from engram.ssd.layout import DiskLayout


def row_offsets(layout: DiskLayout, ids: np.ndarray) -> np.ndarray:
    """Byte offset in the file of each row id (int64)."""
    ids = ids.astype(np.int64, copy=False)
    rpb = layout.rows_per_block
    return (ids // rpb) * layout.block_bytes + (ids % rpb) * layout.row_bytes


def first_pages(layout: DiskLayout, ids: np.ndarray) -> np.ndarray:
    """Index of the first page holding each row (a row spans ``pages_per_block`` pages
    only when it is wider than a page)."""
    return (ids.astype(np.int64, copy=False) // layout.rows_per_block) * layout.pages_per_block


def next_histories(
    window: int, token_ids: torch.Tensor, seq_lens: torch.Tensor, histories: torch.Tensor
) -> torch.Tensor:
    """Each request's history (its ``window - 1`` latest tokens, left-padded) once it has
    consumed its chunk of ``token_ids`` (``seq_lens`` tokens each, requests in order)."""
    chunks = torch.split(torch.as_tensor(token_ids, dtype=torch.int64), seq_lens.tolist())
    return torch.stack(
        [
            torch.cat([h.to(torch.int64), c])[-(window - 1) :]
            for h, c in zip(histories, chunks, strict=True)
        ]
    )


def total_table_bytes(spec: EngramSpec) -> int:
    """Bytes of all of ``spec``'s tables together."""
    return sum(spec.table_bytes(i) for i in range(spec.n_layers))
