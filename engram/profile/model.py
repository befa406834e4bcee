"""The hash a profile counts through: the model's own, built as the server builds it.

``EngramSpec.from_hf_config`` of the model's ``config.json`` and the compressed token
map of its tokenizer (:func:`engram.token_map.build_token_map`, cached on disk) give the
``NgramHasher`` the tiny model's server hashes with; DeepSeek-V4.1's server hashes with
upstream's hasher over the same layout and the same token-map rules. Qwen3.8-Flash-Next's
PLE hash belongs to the plugin (its constants are checkpoint buffers), so its tables are
not profiled here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engram.errors import EngramConfigError, EngramInputError
from engram.hashing import NgramHasher
from engram.spec import EngramSpec
from engram.token_map import build_token_map, resolve_tokenizer

TOKENIZER_FILE = "tokenizer.json"


def model_hasher(hf_config: Mapping[str, Any], tokenizer: Any, where: str) -> NgramHasher:
    """The ``NgramHasher`` of a model's config and tokenizer (a ``tokenizers.Tokenizer``,
    a tokenizer directory or ``tokenizer.json``); ``where`` names the model in errors."""
    try:
        spec = EngramSpec.from_hf_config(dict(hf_config))
    except EngramConfigError as exc:
        raise EngramConfigError(
            f"{where} has no Engram hash to profile ({exc}); profiles cover Engram models "
            "(DeepSeek-V4.1, the tiny model), not Qwen3.8-Flash-Next's PLE tables"
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
