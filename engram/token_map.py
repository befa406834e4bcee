"""Token compression: raw token id -> compressed id, cached on disk per tokenizer.

Every token is decoded on its own (special tokens kept) and keyed by its normalised text
(NFKC, NFD, strip accents, lowercase, whitespace runs -> one space, trimmed; a token that
is only whitespace stays one space). A token whose text holds U+FFFD (a partial UTF-8
byte) is keyed by its raw token string instead, and one that normalises to nothing by its
raw text. Compressed ids are handed out in first-seen order of keys over ascending token
id, so ``max(map) + 1`` is the compressed vocab size every hash multiplier depends on.

Decoding a large vocabulary takes seconds, so the map is cached under
``$SGLANG_ENGRAM_CACHE`` (default ``~/.cache/sglang-engram``), keyed by a hash of the
tokenizer's content and the ``tokenizers`` version that decoded it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engram.errors import EngramInputError
from engram.files import atomic_write

logger = logging.getLogger(__name__)

CACHE_ENV = "SGLANG_ENGRAM_CACHE"
# NOTE: part of every cache key; bump it whenever the compression rules change so that
# stale maps are never read back.
MAP_FORMAT = "engram-token-map-v1"
_SENTINEL = "\ue000"
_PARTIAL_UTF8 = "\ufffd"


def build_token_map(tokenizer: Any, *, cache: bool = True) -> tuple[torch.Tensor, int]:
    """``(LongTensor [vocab] of compressed ids, compressed vocab size)``.

    ``tokenizer`` is a transformers fast tokenizer, a ``tokenizers.Tokenizer``, a
    tokenizer directory (loaded with transformers) or a ``tokenizer.json`` file.
    """
    backend, size = resolve_tokenizer(tokenizer)
    path = cache_path(tokenizer_fingerprint(backend, size)) if cache else None
    table = _read_cached(path, size) if path is not None else None
    if table is None:
        table = compress_vocab(backend, size)
        if path is not None:
            _write_cache(path, table)
    compressed_vocab_size = int(table.max()) + 1 if table.size else 0
    return torch.from_numpy(table), compressed_vocab_size


def resolve_tokenizer(tokenizer: Any) -> tuple[Any, int]:
    """``(tokenizers.Tokenizer, vocabulary size)`` of any accepted tokenizer form."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, (str, os.PathLike)):
        path = Path(tokenizer)
        if path.is_file():
            tokenizer = Tokenizer.from_file(str(path))
        elif path.is_dir():
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(path))
        else:
            raise EngramInputError(f"tokenizer path {str(path)!r} does not exist")
    if isinstance(tokenizer, Tokenizer):
        return tokenizer, tokenizer.get_vocab_size(with_added_tokens=True)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(backend, Tokenizer):
        return backend, len(tokenizer)
    raise EngramInputError(
        "build_token_map needs a transformers *fast* tokenizer, a tokenizers.Tokenizer, "
        f"a tokenizer directory or a tokenizer.json path; got {type(tokenizer).__name__}"
    )


def compress_vocab(backend: Any, size: int) -> np.ndarray:
    """The uncached map: int64 [size] of compressed ids."""
    normalizer = _normalizer()
    texts = backend.decode_batch([[i] for i in range(size)], skip_special_tokens=False)
    ids: dict[str | None, int] = {}
    out = np.empty(size, dtype=np.int64)
    for token_id, text in enumerate(texts):
        if _PARTIAL_UTF8 in text:
            key = backend.id_to_token(token_id)
        else:
            key = normalizer.normalize_str(text) or text
        out[token_id] = ids.setdefault(key, len(ids))
    return out


def tokenizer_fingerprint(backend: Any, size: int) -> str:
    """sha256 of the tokenizer's content, vocabulary size and ``tokenizers`` version."""
    import tokenizers

    content = json.loads(backend.to_str())
    # NOTE: transformers toggles truncation/padding on the backend per call; they do not
    # change how single tokens decode, so they stay out of the key.
    content.pop("truncation", None)
    content.pop("padding", None)
    digest = hashlib.sha256()
    # NOTE: the version too: decoding (byte fallback, normalizers) may change between
    # releases of the tokenizers library, and with it the map.
    text = json.dumps(content, sort_keys=True, ensure_ascii=False)
    for part in (MAP_FORMAT, tokenizers.__version__, text, str(size)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "sglang-engram"


def cache_path(fingerprint: str) -> Path:
    return cache_dir() / f"token_map-{fingerprint}.npy"


def _normalizer() -> Any:
    from tokenizers import Regex, normalizers

    return normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.NFD(),
            normalizers.StripAccents(),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
            # NOTE: a token that is a single space would vanish under Strip(); park it
            # on a private-use character and restore it afterwards.
            normalizers.Replace(Regex(r"^ $"), _SENTINEL),
            normalizers.Strip(),
            normalizers.Replace(_SENTINEL, " "),
        ]
    )


def _read_cached(path: Path, size: int) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        table = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        logger.warning("ignoring unreadable token map cache %s: %s", path, exc)
        return None
    if table.dtype != np.int64 or table.shape != (size,) or (size and table.min() < 0):
        logger.warning("ignoring token map cache %s: it does not fit the tokenizer", path)
        return None
    return table


def _write_cache(path: Path, table: np.ndarray) -> None:
    try:
        atomic_write(path, lambda f: np.save(f, table, allow_pickle=False))
    except OSError as exc:
        logger.warning("could not cache the token map at %s: %s", path, exc)
