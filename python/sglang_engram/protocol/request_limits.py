"""What a model family's layers assume of every request: the family's declaration that the
one request guard (:mod:`sglang_engram.integration.request_checks`) enforces.

A family states it from its ``config.json`` (:meth:`ModelFamily.request_limits`); the
plugin asks for it at start-up, so a checkpoint whose config cannot say it fails there,
not at the first bad request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engram.errors import EngramConfigError


@dataclass(frozen=True)
class RequestLimits:
    """Token ids a request may carry: ``[0, vocab_size)``, at least ``min_prompt_tokens``
    of them in a prompt."""

    vocab_size: int
    # NOTE: True where a layer indexes a per-tokenizer-id structure (Engram's compressed
    # token map has one entry per tokenizer id), so an id the tokenizer does not have is
    # out of range even below vocab_size (the embedding is often padded past the tokenizer).
    within_tokenizer: bool = False
    # NOTE: an empty prompt reaches the model as a batch of zero tokens, which no family's
    # forward pass survives (the logits processor indexes the last of none).
    min_prompt_tokens: int = 1

    def __post_init__(self) -> None:
        if self.vocab_size < 1:
            raise EngramConfigError(f"vocab_size must be >= 1, not {self.vocab_size}")

    def id_bound(self, tokenizer_size: int | None) -> int:
        """Ids in ``[0, bound)`` are valid for a server whose tokenizer has
        ``tokenizer_size`` ids (``None``: no tokenizer)."""
        if self.within_tokenizer and tokenizer_size is not None:
            return min(self.vocab_size, tokenizer_size)
        return self.vocab_size


def config_vocab_size(config: Mapping[str, Any], where: str = "config.json") -> int:
    """``vocab_size`` of a (text) config, or an ``EngramConfigError`` naming what is wrong."""
    value = config.get("vocab_size")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EngramConfigError(
            f"{where} has no usable vocab_size ({value!r}): the request guard needs it to "
            "refuse token ids outside the vocabulary"
        )
    return value
