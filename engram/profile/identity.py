"""What a row profile is valid for: the hash that turns text into a table's row ids.

A profile counts row ids, so it holds for every table those ids index the same way: the
same token map (the tokenizer, compressed), n-gram size, heads, pad id, and per layer the
same row count and hash constants (multipliers, primes, offsets). It does not depend on
the rows' contents: a table converted again, or retrained with the same config, keeps
its profile (the SSD manifest's ``table_digest``, a checksum of the contents, is
therefore not part of it; its row count is).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from engram.errors import EngramInputError
from engram.hashing import NgramHasher

# NOTE: digests are shortened to this many hex digits: they tell configs apart, they are
# no security boundary.
DIGEST_CHARS = 16


def digest(*arrays: np.ndarray) -> str:
    """A short blake2b of the arrays' int64 bytes and shapes."""
    h = hashlib.blake2b(digest_size=DIGEST_CHARS // 2)
    for array in arrays:
        array = np.ascontiguousarray(array, dtype=np.int64)
        h.update(repr(array.shape).encode())
        h.update(array.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class TableIdentity:
    """One layer's table as the hash sees it."""

    layer: int
    num_rows: int
    hash_digest: str  # the layer's multipliers, primes and offsets


@dataclass(frozen=True)
class HashIdentity:
    """The hash of one model, every Engram layer."""

    token_map_digest: str
    max_ngram_size: int
    n_heads: int
    pad_compressed: int
    tables: tuple[TableIdentity, ...]

    @classmethod
    def of(cls, hasher: NgramHasher) -> HashIdentity:
        spec = hasher.spec
        tables = tuple(
            TableIdentity(
                layer=layer,
                num_rows=spec.num_embeddings[i],
                hash_digest=digest(
                    hasher.multipliers[i].numpy(),
                    hasher.primes[i].numpy(),
                    hasher.offsets[i].numpy(),
                ),
            )
            for i, layer in enumerate(spec.layer_ids)
        )
        return cls(
            token_map_digest=digest(hasher.token_map.numpy()),
            max_ngram_size=spec.max_ngram_size,
            n_heads=spec.n_heads,
            pad_compressed=hasher.pad_compressed,
            tables=tables,
        )

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(t.layer for t in self.tables)

    def table(self, layer: int) -> TableIdentity:
        for table in self.tables:
            if table.layer == layer:
                return table
        raise EngramInputError(
            f"the profile has no table for layer {layer} (it profiles layers "
            f"{_listed(self.layers)})"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HashIdentity:
        """The identity of a profile header; :class:`EngramInputError` if malformed."""
        try:
            return cls(
                token_map_digest=str(data["token_map_digest"]),
                max_ngram_size=int(data["max_ngram_size"]),
                n_heads=int(data["n_heads"]),
                pad_compressed=int(data["pad_compressed"]),
                tables=tuple(
                    TableIdentity(int(t["layer"]), int(t["num_rows"]), str(t["hash_digest"]))
                    for t in data["tables"]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EngramInputError(f"the profile's identity is malformed ({exc!r})") from None

    def mismatch(self, served: HashIdentity) -> str | None:
        """What differs between this (a profile's) hash and the ``served`` one, in words;
        ``None`` when they are the same."""
        if self.token_map_digest != served.token_map_digest:
            return (
                f"it was made with another tokenizer (token map {self.token_map_digest}, "
                f"this model's {served.token_map_digest})"
            )
        for what, mine, theirs in (
            ("n-gram size", self.max_ngram_size, served.max_ngram_size),
            ("hash heads", self.n_heads, served.n_heads),
            ("compressed pad id", self.pad_compressed, served.pad_compressed),
        ):
            if mine != theirs:
                return f"its {what} is {mine}, this model's {theirs}"
        if self.layers != served.layers:
            return (
                f"it profiles layers {_listed(self.layers)}, this model's Engram layers are "
                f"{_listed(served.layers)}"
            )
        for mine, theirs in zip(self.tables, served.tables, strict=True):
            if mine.num_rows != theirs.num_rows:
                return (
                    f"it profiles layer {mine.layer}'s table of {mine.num_rows:,} rows, "
                    f"this model's has {theirs.num_rows:,}"
                )
            if mine.hash_digest != theirs.hash_digest:
                return (
                    f"it hashes layer {mine.layer} with other constants (multipliers, primes "
                    f"or offsets {mine.hash_digest}, this model's {theirs.hash_digest})"
                )
        return None


def _listed(layers: tuple[int, ...]) -> str:
    return ", ".join(str(layer) for layer in layers) or "none"
