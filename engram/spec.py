"""The Engram hashing layout of a model, derived from its HF config.

Everything the hash needs (primes, row offsets, multipliers) is a pure function of the
``engram_*`` config fields, so it is computed once here and shared by the hasher, the
tables and the kernels.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engram import fp8
from engram.errors import EngramConfigError
from engram.fp8 import FP8_BLOCK
from engram.primes import prime_layout

_REQUIRED = (
    "engram_layer_ids",
    "engram_num_embeddings",
    "engram_max_ngram_size",
    "engram_vocab_size",
    "engram_n_heads",
    "engram_head_dim",
)


def _field(cfg: Any, name: str, default: Any = None) -> Any:
    if isinstance(cfg, Mapping):
        return cfg.get(name, default)
    return getattr(cfg, name, default)


def valid_row_width(head_dim: int) -> bool:
    """Rows are whole FP8 blocks: a positive multiple of ``FP8_BLOCK`` values."""
    return head_dim >= FP8_BLOCK and head_dim % FP8_BLOCK == 0


def has_engram(cfg: Any) -> bool:
    """True when ``cfg`` declares at least one Engram layer."""
    return bool(_field(cfg, "engram_layer_ids") or ())


@dataclass(frozen=True)
class EngramSpec:
    """Hashing and table layout of one Engram model (all layers)."""

    layer_ids: tuple[int, ...]
    num_embeddings: tuple[int, ...]
    max_ngram_size: int
    vocab_size: int
    n_heads: int
    head_dim: int
    pad_token_id: int = 2
    compressed_vocab_size: int | None = None
    hidden_size: int | None = None
    hc_mult: int | None = None
    rms_norm_eps: float = 1e-6

    @classmethod
    def from_hf_config(cls, cfg: Any) -> EngramSpec:
        """Build from a dict or a config object carrying the ``engram_*`` fields."""
        missing = [name for name in _REQUIRED if _field(cfg, name) is None]
        if missing or not _field(cfg, "engram_layer_ids"):
            what = ", ".join(missing) if missing else "engram_layer_ids is empty"
            raise EngramConfigError(f"config has no usable Engram fields: missing {what}")
        spec = cls(
            layer_ids=tuple(int(x) for x in _field(cfg, "engram_layer_ids")),
            num_embeddings=tuple(int(x) for x in _field(cfg, "engram_num_embeddings")),
            max_ngram_size=int(_field(cfg, "engram_max_ngram_size")),
            vocab_size=int(_field(cfg, "engram_vocab_size")),
            n_heads=int(_field(cfg, "engram_n_heads")),
            head_dim=int(_field(cfg, "engram_head_dim")),
            pad_token_id=int(_field(cfg, "engram_pad_token_id", 2)),
            compressed_vocab_size=_optional_int(_field(cfg, "engram_compressed_vocab_size")),
            hidden_size=_optional_int(_field(cfg, "hidden_size")),
            hc_mult=_optional_int(_field(cfg, "hc_mult")),
            rms_norm_eps=float(_field(cfg, "rms_norm_eps", 1e-6) or 1e-6),
        )
        spec.validate()
        return spec

    def validate(self) -> None:
        """Raise :class:`EngramConfigError` naming the first inconsistent field."""
        if len(set(self.layer_ids)) != len(self.layer_ids):
            raise EngramConfigError(f"engram_layer_ids has duplicates: {list(self.layer_ids)}")
        if any(layer < 0 for layer in self.layer_ids):
            raise EngramConfigError(f"engram_layer_ids must be >= 0: {list(self.layer_ids)}")
        if len(self.num_embeddings) != len(self.layer_ids):
            raise EngramConfigError(
                f"engram_num_embeddings has {len(self.num_embeddings)} entries but "
                f"engram_layer_ids has {len(self.layer_ids)}"
            )
        if self.max_ngram_size < 2:
            raise EngramConfigError(
                f"engram_max_ngram_size must be >= 2, got {self.max_ngram_size}"
            )
        if self.n_heads < 1:
            raise EngramConfigError(f"engram_n_heads must be >= 1, got {self.n_heads}")
        if not valid_row_width(self.head_dim):
            raise EngramConfigError(
                f"engram_head_dim must be a positive multiple of {FP8_BLOCK}, got {self.head_dim}"
            )
        if self.vocab_size < 2:
            raise EngramConfigError(f"engram_vocab_size must be >= 2, got {self.vocab_size}")
        for layer, sums, declared in zip(
            self.layer_ids, self.prime_sums, self.num_embeddings, strict=True
        ):
            if sums != declared:
                raise EngramConfigError(
                    f"Engram layer {layer}: its primes sum to {sums:,} rows but "
                    f"engram_num_embeddings says {declared:,}"
                )

    # ---- derived layout -------------------------------------------------------------

    @property
    def n_layers(self) -> int:
        return len(self.layer_ids)

    @property
    def n_cols(self) -> int:
        """Hash columns per layer: (N - 1) n-gram orders x H heads."""
        return (self.max_ngram_size - 1) * self.n_heads

    @property
    def scale_dim(self) -> int:
        return self.head_dim // FP8_BLOCK

    @property
    def row_bytes(self) -> int:
        """Bytes of one FP8 row plus its ue8m0 scales."""
        return fp8.row_bytes(self.head_dim)

    @functools.cached_property
    def primes(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """Bucket sizes, indexed [layer][n-gram order - 2][head]."""
        return prime_layout(self.n_layers, self.max_ngram_size, self.n_heads, self.vocab_size)

    @property
    def prime_sums(self) -> tuple[int, ...]:
        return tuple(sum(p for order in layer for p in order) for layer in self.primes)

    @functools.cached_property
    def _column_primes(self) -> np.ndarray:
        return np.array(
            [[p for order in layer for p in order] for layer in self.primes], dtype=np.int64
        )

    @property
    def primes_tensor(self) -> torch.Tensor:
        """LongTensor [n_layers, N - 1, H]."""
        return torch.from_numpy(self._column_primes.copy()).view(
            self.n_layers, self.max_ngram_size - 1, self.n_heads
        )

    @property
    def offsets(self) -> torch.Tensor:
        """LongTensor [n_layers, (N - 1) * H]: first row of each hash column."""
        cols = self._column_primes
        out = np.zeros_like(cols)
        out[:, 1:] = np.cumsum(cols[:, :-1], axis=1)
        return torch.from_numpy(out)

    def table_bytes(self, layer_index: int) -> int:
        return self.num_embeddings[layer_index] * self.row_bytes

    def multipliers(self, compressed_vocab_size: int | None = None) -> torch.Tensor:
        """LongTensor [n_layers, N] of odd hash multipliers for ``compressed_vocab_size``."""
        vocab = compressed_vocab_size or self.compressed_vocab_size
        if not vocab:
            raise EngramConfigError(
                "multipliers need the compressed vocab size: pass it or set "
                "engram_compressed_vocab_size in the config"
            )
        return hash_multipliers(self.layer_ids, self.max_ngram_size, int(vocab))


def hash_multipliers(layer_ids: tuple[int, ...], n: int, compressed_vocab: int) -> torch.Tensor:
    """Per layer ``L``: ``2 * default_rng(10007 * L).integers(0, bound, n) + 1``.

    NOTE: ``bound`` keeps ``compressed_id * multiplier`` inside int64, so the xor-fold
    never overflows and ``%`` agrees across numpy, torch and Triton.
    """
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab) // 2)
    rows = [
        np.random.default_rng(10007 * layer).integers(0, bound, n, dtype=np.int64) * 2 + 1
        for layer in layer_ids
    ]
    return torch.from_numpy(np.stack(rows))


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
