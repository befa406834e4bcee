"""Training batches: deterministic random windows of a token stream, with row ids hashed
as inference would (each window's history is the tokens before it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from engram.errors import EngramInputError

if TYPE_CHECKING:
    from engram.model.modeling import TinyEngramModel
    from engram.model.train import TrainOptions


class Batches:
    """Deterministic random windows of a token stream, with their hashed row ids."""

    def __init__(self, stream: torch.Tensor, model: TinyEngramModel, opts: TrainOptions):
        self.stream, self.hasher, self.opts = stream, model.hasher, opts
        self.gen = torch.Generator().manual_seed(opts.seed + 2)
        self.history = self.hasher.window - 1
        if stream.numel() < opts.seq_len + self.history + 2:
            raise EngramInputError(
                f"the training split has only {stream.numel()} tokens, fewer than one window"
            )

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        o, n = self.opts, self.history
        high = self.stream.numel() - o.seq_len - 1
        starts = torch.randint(n, high, (o.batch_size,), generator=self.gen).tolist()
        return window_batch(self.stream, starts, o.seq_len, self.hasher)


def window_batch(
    stream: torch.Tensor, starts: Sequence[int], seq_len: int, hasher: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [B, L], targets [B, L], row ids [B, L, layers, cols]) of windows at ``starts``;
    each window hashes with the tokens before it as its history."""
    n = hasher.window - 1  # type: ignore[attr-defined]
    ids = torch.stack([stream[s : s + seq_len] for s in starts])
    targets = torch.stack([stream[s + 1 : s + seq_len + 1] for s in starts])
    rows = torch.stack(
        [hasher.hash(stream[s : s + seq_len], stream[max(0, s - n) : s]) for s in starts]  # type: ignore[attr-defined]
    )
    return ids, targets, rows
