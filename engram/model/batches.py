"""Training batches: deterministic random windows of a token stream, with row ids hashed
as inference would (each window's history is the tokens before it)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engram.errors import EngramInputError
from engram.hashing import NgramHasher


class Batches:
    """Deterministic random windows of a token stream, with their hashed row ids:
    ``batch_size`` windows of ``seq_len`` tokens per batch, drawn from ``seed``."""

    def __init__(
        self,
        stream: torch.Tensor,
        hasher: NgramHasher,
        *,
        seq_len: int,
        batch_size: int,
        seed: int,
    ):
        self.stream, self.hasher = stream, hasher
        self.seq_len, self.batch_size = seq_len, batch_size
        self.gen = torch.Generator().manual_seed(seed)
        self.history = self.hasher.window - 1
        if stream.numel() < seq_len + self.history + 2:
            raise EngramInputError(
                f"the training split has only {stream.numel()} tokens, fewer than one window"
            )

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        high = self.stream.numel() - self.seq_len - 1
        starts = torch.randint(self.history, high, (self.batch_size,), generator=self.gen)
        return window_batch(self.stream, starts.tolist(), self.seq_len, self.hasher)


def window_batch(
    stream: torch.Tensor, starts: Sequence[int], seq_len: int, hasher: NgramHasher
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [B, L], targets [B, L], row ids [B, L, layers, cols]) of windows at ``starts``;
    each window hashes with the tokens before it as its history."""
    n = hasher.window - 1
    ids = torch.stack([stream[s : s + seq_len] for s in starts])
    targets = torch.stack([stream[s + 1 : s + seq_len + 1] for s in starts])
    rows = torch.stack(
        [hasher.hash(stream[s : s + seq_len], stream[max(0, s - n) : s]) for s in starts]
    )
    return ids, targets, rows
