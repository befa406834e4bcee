"""The Engram hash as the read-ahead's :class:`~sglang_engram.protocol.row_hasher.RowHasher`
(DeepSeek-V4.1 and the tiny model): the core library's ``NgramHasher`` over the model's
token map, reading SGLang's multimodal pad ids (past the vocabulary) as the image token,
as upstream's hasher does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from engram.hashing import NgramHasher
from engram.spec import EngramSpec


class EngramRowHasher:
    def __init__(self, hasher: NgramHasher):
        self.hasher = hasher
        self.layer_ids = tuple(hasher.spec.layer_ids)
        self.window = hasher.window

    def _tokens(self, ids: Sequence[int]) -> torch.Tensor:
        tokens = torch.as_tensor(ids, dtype=torch.int64, device="cpu")
        if self.hasher.image_token_id is not None:
            tokens = tokens.masked_fill(
                tokens >= self.hasher.vocab_size, self.hasher.image_token_id
            )
        return tokens

    def prompt_rows(self, token_ids: Sequence[int]) -> torch.Tensor:
        return self.hasher.hash(self._tokens(token_ids))

    def step_rows(self, tails: Sequence[Sequence[int]]) -> torch.Tensor:
        tokens = [self._tokens(tail) for tail in tails]
        return self.hasher.hash_batch(
            torch.stack([tail[-1] for tail in tokens]),
            torch.ones(len(tokens), dtype=torch.int64, device="cpu"),
            torch.stack([self.hasher.history_row(tail[:-1]) for tail in tokens]),
        )


def hash_holder(model: Any) -> Any | None:
    """The module of a loaded model that holds its ``engram_hasher`` (and ``config``):
    upstream's ``DeepseekV4Model``, or the tiny model's ``EngramQwen3Model``; ``None``
    with Engram off (no hasher)."""
    return next((m for m in model.modules() if getattr(m, "engram_hasher", None) is not None), None)


def upstream_row_hasher(model: Any) -> EngramRowHasher | None:
    """DeepSeek-V4.1's hash as upstream's ``EngramHasher`` built it (its layout and
    compressed token map) in ``model``, as an ``engram.NgramHasher``."""
    holder = hash_holder(model)
    if holder is None:
        return None
    upstream = holder.engram_hasher
    spec = EngramSpec.from_hf_config(holder.config)
    return EngramRowHasher(
        NgramHasher(
            spec,
            upstream.token_map.cpu(),
            spec.pad_token_id,
            image_token_id=upstream.image_token_id,
        )
    )
