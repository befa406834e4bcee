"""The files of a tiny model's directory, each missing one named with what to do about it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram.model_config import model_dir_file, read_model_config

BUILD_HINT = "build one with python -m engram.model build --out DIR, or pass another --model"


def model_file(model_dir: str | Path, name: str) -> Path:
    """``model_dir/name``; :class:`EngramConfigError` when the directory or the file is
    missing."""
    return model_dir_file(model_dir, name, BUILD_HINT)


def read_config(model_dir: str | Path) -> dict[str, Any]:
    """The tiny model's ``config.json`` (:func:`~engram.model_config.read_model_config`)."""
    return read_model_config(model_dir, BUILD_HINT)
