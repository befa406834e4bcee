"""The files of a model directory, each missing one named with what to do about it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engram.errors import EngramConfigError

_BUILD_HINT = "build one with python -m engram.model build --out DIR, or pass another --model"


def model_file(model_dir: str | Path, name: str) -> Path:
    """``model_dir/name``; :class:`EngramConfigError` when the directory or the file is
    missing."""
    directory = Path(model_dir)
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise EngramConfigError(f"model directory {model_dir} {what}; {_BUILD_HINT}")
    path = directory / name
    if not path.is_file():
        raise EngramConfigError(f"{model_dir} has no {name}; {_BUILD_HINT}")
    return path


def read_config(model_dir: str | Path) -> dict[str, Any]:
    """``config.json`` of a model directory as a mapping, or one error naming the file."""
    path = model_file(model_dir, "config.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EngramConfigError(f"{path} is not valid JSON ({exc}); rebuild the model") from None
    if not isinstance(data, dict):
        raise EngramConfigError(f"{path} holds no JSON object; rebuild the model")
    return data
