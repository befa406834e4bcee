"""What a Qwen3.8-Flash-Next (``qwen4_exp``) ``config.json`` says about its PLE tables,
read as upstream SGLang reads it (``srt/configs/qwen4_exp.py``, ``srt/models/qwen4_exp.py``).

The text model's fields are in ``text_config`` when the config has one, else at the top
level (older text-only exports). NOTE: with a ``text_config``, upstream ignores a
top-level ``split_ngram_parts`` (its config drops it: "the nested text config is
authoritative"), and so does this reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram.primes import is_prime

DEFAULT_SPLIT_PARTS = 512
FP8_DTYPE_NAME = "float8_e4m3fn"


@dataclass(frozen=True)
class PleConfig:
    """The PLE fields of one checkpoint's config (upstream's defaults where absent)."""

    ple_layer_ids: tuple[int, ...] = ()  # 1-based, as the config writes them
    ple_embed_dim: int | None = None
    ngram_size: int = 3
    heads_per_ngram: int = 8
    ngram_vocab_size_base: int = 20_000_000
    divisible_by: int = 128
    split_ngram_parts: int = DEFAULT_SPLIT_PARTS
    fp8_storage: bool = False  # upstream keeps the table in fp8 whatever the checkpoint holds
    quant_method: str | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any] | None) -> PleConfig:
        if config is None:
            return cls()
        nested = config.get("text_config")
        text = nested if isinstance(nested, dict) else config
        quant = text.get("quantization_config") or config.get("quantization_config") or {}
        quant_method = quant.get("quant_method") if isinstance(quant, dict) else None
        embed_dim = text.get("ple_embed_dim") or text.get("hidden_size")
        return cls(
            ple_layer_ids=tuple(int(i) for i in text.get("ple_layer_ids") or ()),
            ple_embed_dim=None if embed_dim is None else int(embed_dim),
            ngram_size=int(text.get("ngram_size", 3)),
            heads_per_ngram=int(text.get("heads_per_ngram", 8)),
            ngram_vocab_size_base=int(text.get("ngram_vocab_size_base", 20_000_000)),
            divisible_by=int(text.get("make_ngram_vocab_size_divisible_by", 128)),
            split_ngram_parts=int(text.get("split_ngram_parts", DEFAULT_SPLIT_PARTS)),
            # NOTE: upstream's ``_ple_table_is_fp8``: the config asks for fp8 storage, or
            # an fp8 quantisation config covers the model.
            fp8_storage=text.get("ple_embedding_dtype") == FP8_DTYPE_NAME or quant_method == "fp8",
            quant_method=quant_method,
        )

    @property
    def ngram_heads(self) -> int:
        return (self.ngram_size - 1) * self.heads_per_ngram

    @property
    def layer_ids(self) -> tuple[int, ...]:
        """The decoder layers (0-based, as tensor names number them) with a PLE table."""
        return tuple(sorted({i - 1 for i in self.ple_layer_ids}))

    @property
    def head_dim(self) -> int | None:
        """Values per table row (``ple_embed_dim`` over the n-gram heads)."""
        return None if self.ple_embed_dim is None else self.ple_embed_dim // self.ngram_heads

    def head_sizes(self, layer: int) -> list[int]:
        """Decoder layer ``layer``'s prime bucket size per n-gram head, as upstream
        computes them (its checkpoint's ``ngram_heads_vocab_sizes`` buffer overrides them)."""
        index = self.layer_ids.index(layer)
        primes = _primes_from(self.ngram_vocab_size_base, (index + 1) * self.ngram_heads)
        return primes[index * self.ngram_heads :]

    def num_rows(self, layer: int) -> int:
        """Rows of decoder layer ``layer``'s table as upstream sizes it: the sum of its
        heads' prime bucket sizes, padded to ``make_ngram_vocab_size_divisible_by``."""
        return padded_rows(self.head_sizes(layer), self.divisible_by)


def padded_rows(head_sizes: list[int], divisible_by: int) -> int:
    """The table rows of bucket sizes ``head_sizes`` (a checkpoint's buffer)."""
    return -(-sum(head_sizes) // divisible_by) * divisible_by


def _primes_from(start: int, count: int) -> list[int]:
    """The first ``count`` primes >= ``start`` (upstream: repeated ``nextprime`` from
    ``ngram_vocab_size_base - 1``; head ``g`` of all PLE layers takes the ``g``-th)."""
    primes, candidate = [], start
    while len(primes) < count:
        if is_prime(candidate):
            primes.append(candidate)
        candidate += 1
    return primes
