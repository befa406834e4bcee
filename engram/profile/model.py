"""The hash a profile counts through: the model's own, built as the server builds it.

Engram models (DeepSeek-V4.1, the tiny model): ``EngramSpec.from_hf_config`` of the
model's ``config.json`` and the compressed token map of its tokenizer
(:func:`engram.token_map.build_token_map`, cached on disk) give the ``NgramHasher`` the
tiny model's server hashes with; DeepSeek-V4.1's server hashes with upstream's hasher
over the same layout and the same token-map rules. Qwen3.8-Flash-Next: its PLE hash
with the constants its checkpoint carries (:mod:`engram.profile.ple_model`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engram.errors import EngramConfigError, EngramInputError
from engram.hashing import NgramHasher
from engram.ple_hashing import PleRowHasher
from engram.profile.identity import HashIdentity
from engram.profile.ple_model import is_ple_config, ple_hasher
from engram.spec import EngramSpec
from engram.token_map import build_token_map, resolve_tokenizer

TOKENIZER_FILE = "tokenizer.json"


def profile_hash(
    model_dir: Path, hf_config: Mapping[str, Any], tokenizer: Any
) -> tuple[NgramHasher | PleRowHasher, HashIdentity]:
    """The hash of the model in ``model_dir`` (its ``config.json`` read as
    ``hf_config``) over ``tokenizer`` (a ``tokenizers.Tokenizer``, a tokenizer
    directory or ``tokenizer.json``), and the identity a profile of it carries."""
    if is_ple_config(hf_config):
        hasher, rows = ple_hasher(model_dir, hf_config)
        return hasher, HashIdentity.of_ple(hasher, rows, tokenizer)
    engram = model_hasher(hf_config, tokenizer, str(model_dir))
    return engram, HashIdentity.of(engram)


def model_hasher(hf_config: Mapping[str, Any], tokenizer: Any, where: str) -> NgramHasher:
    """The ``NgramHasher`` of an Engram model's config and tokenizer (a
    ``tokenizers.Tokenizer``, a tokenizer directory or ``tokenizer.json``); ``where``
    names the model in errors."""
    try:
        spec = EngramSpec.from_hf_config(dict(hf_config))
    except EngramConfigError as exc:
        raise EngramConfigError(
            f"{where} has no Engram or PLE hash to profile ({exc}); profiles cover Engram "
            "models (DeepSeek-V4.1, the tiny model) and Qwen3.8-Flash-Next's PLE tables"
        ) from None
    token_map, _ = build_token_map(tokenizer)
    return NgramHasher(spec, token_map)


def load_tokenizer(model_dir: Path, tokenizer: Path | None = None) -> Any:
    """The ``tokenizers.Tokenizer`` of ``tokenizer`` (a file or directory), else of
    ``model_dir``'s ``tokenizer.json``."""
    path = tokenizer or model_dir / TOKENIZER_FILE
    if path.is_dir():
        path = path / TOKENIZER_FILE
    if not path.is_file():
        raise EngramInputError(
            f"{path} does not exist: the profile tokenises with the model's own tokenizer; "
            "pass --tokenizer PATH (a tokenizer.json or its directory)"
        )
    backend, _ = resolve_tokenizer(path)
    return backend
