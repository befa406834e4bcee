"""A model directory's ``config.json``, read in one place with one error policy.

The directory or the file missing, a file that cannot be read, text that is not JSON or
JSON that is not an object: each is one :class:`EngramConfigError` naming the path and
what to do. Where a directory may have no ``config.json`` (a hub id, a bare checkpoint),
the caller asks :func:`has_model_config` first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engram.errors import EngramConfigError

CONFIG_FILE = "config.json"
FIX = "fix or replace it"


def model_dir_file(directory: str | Path, name: str, fix: str = FIX) -> Path:
    """``directory/name``; :class:`EngramConfigError` when the directory or the file is
    missing (``fix``: what to do about it)."""
    folder = Path(directory)
    if not folder.is_dir():
        what = "is not a directory" if folder.exists() else "does not exist"
        raise EngramConfigError(f"model directory {directory} {what}; {fix}")
    path = folder / name
    if not path.is_file():
        raise EngramConfigError(f"{directory} has no {name}; {fix}")
    return path


def has_model_config(directory: str | Path) -> bool:
    return (Path(directory) / CONFIG_FILE).is_file()


def read_model_config(directory: str | Path, fix: str = FIX) -> dict[str, Any]:
    """``config.json`` of ``directory`` as a mapping, or one error naming the file."""
    path = model_dir_file(directory, CONFIG_FILE, fix)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EngramConfigError(f"cannot read {path} ({exc.strerror}); {fix}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EngramConfigError(f"{path} is not valid JSON ({exc}); {fix}") from None
    if not isinstance(data, dict):
        raise EngramConfigError(f"{path} holds no JSON object; {fix}")
    return data
