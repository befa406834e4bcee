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
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from engram.errors import EngramInputError
from engram.hashing import NgramHasher
from engram.ple_hashing import PleRowHasher
from engram.token_map import resolve_tokenizer

# NOTE: digests are shortened to this many hex digits: they tell configs apart, they are
# no security boundary.
DIGEST_CHARS = 16
ENGRAM, PLE = "engram", "ple"


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
    hash_digest: str  # the layer's multipliers, primes (PLE: bucket sizes) and offsets


@dataclass(frozen=True)
class HashIdentity:
    """The hash of one model, every Engram (or PLE) layer."""

    token_map_digest: str  # PLE: of the tokenizer's vocabulary (it hashes raw ids)
    max_ngram_size: int
    n_heads: int  # per n-gram order
    pad_compressed: int  # what a missing predecessor reads as; PLE: the EOS id
    tables: tuple[TableIdentity, ...]
    hash: str = ENGRAM  # NOTE: absent from the headers of profiles older than PLE's

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

    @classmethod
    def of_ple(
        cls, hasher: PleRowHasher, table_rows: Sequence[int], tokenizer: Any
    ) -> HashIdentity:
        """The identity of a PLE hash whose tables have ``table_rows`` rows (in layer
        order), over ``tokenizer``'s ids (a ``tokenizers.Tokenizer`` or a path)."""
        tables = tuple(
            TableIdentity(
                layer=layer.layer_id,
                num_rows=int(rows),
                hash_digest=digest(
                    layer.multipliers.numpy(), layer.vocab_sizes.numpy(), layer.offsets.numpy()
                ),
            )
            for layer, rows in zip(hasher.layers, table_rows, strict=True)
        )
        return cls(
            token_map_digest=vocab_digest(tokenizer),
            max_ngram_size=hasher.window,
            n_heads=hasher.heads_per_ngram,
            pad_compressed=hasher.eos_token_id,
            tables=tables,
            hash=PLE,
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
                hash=str(data.get("hash", ENGRAM)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EngramInputError(f"the profile's identity is malformed ({exc!r})") from None

    def mismatch(self, served: HashIdentity, other: str = "this model") -> str | None:
        """What differs between this (a profile's) hash and the ``served`` one, in words
        (``other`` names the served one's owner); ``None`` when they are the same."""
        if self.hash != served.hash:
            mine, theirs = (_HASHES.get(h, h) for h in (self.hash, served.hash))
            return f"it was counted through the {mine}, {other} hashes with the {theirs}"
        if self.token_map_digest != served.token_map_digest:
            return (
                f"it was made with another tokenizer (token map {self.token_map_digest}, "
                f"{other}'s {served.token_map_digest})"
            )
        pad = "EOS id" if self.hash == PLE else "compressed pad id"
        for what, mine, theirs in (
            ("n-gram size", self.max_ngram_size, served.max_ngram_size),
            ("hash heads", self.n_heads, served.n_heads),
            (pad, self.pad_compressed, served.pad_compressed),
        ):
            if mine != theirs:
                return f"its {what} is {mine}, {other}'s {theirs}"
        if self.layers != served.layers:
            kind = "PLE" if self.hash == PLE else "Engram"
            return (
                f"it profiles layers {_listed(self.layers)}, {other}'s {kind} layers are "
                f"{_listed(served.layers)}"
            )
        for mine, theirs in zip(self.tables, served.tables, strict=True):
            if mine.num_rows != theirs.num_rows:
                return (
                    f"it profiles layer {mine.layer}'s table of {mine.num_rows:,} rows, "
                    f"{other}'s has {theirs.num_rows:,}"
                )
            if mine.hash_digest != theirs.hash_digest:
                return (
                    f"it hashes layer {mine.layer} with other constants (multipliers, primes "
                    f"or offsets {mine.hash_digest}, {other}'s {theirs.hash_digest})"
                )
        return None


def vocab_digest(tokenizer: Any) -> str:
    """A short blake2b of the tokenizer's vocabulary, token by id (a ``tokenizers.Tokenizer``
    or anything :func:`~engram.token_map.resolve_tokenizer` takes).

    NOTE: its model's vocabulary, added tokens left out: transformers adds some of its
    own when it loads a tokenizer directory (``<|endoftext|>`` past the tiny checkpoint's
    2,000 ids), so the server's tokenizer and the ``tokenizer.json`` a profile was made
    with would differ there; the EOS id the hash reads is part of the identity anyway."""
    backend, _ = resolve_tokenizer(tokenizer)
    vocab = backend.get_vocab(with_added_tokens=False)
    h = hashlib.blake2b(digest_size=DIGEST_CHARS // 2)
    for token, token_id in sorted(vocab.items(), key=lambda item: item[1]):
        h.update(f"{token_id}\t{token}\n".encode())
    return h.hexdigest()


_HASHES = {ENGRAM: "Engram hash", PLE: "PLE hash (Qwen3.8-Flash-Next)"}


def _listed(layers: tuple[int, ...]) -> str:
    return ", ".join(str(layer) for layer in layers) or "none"
