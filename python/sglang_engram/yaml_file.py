"""Read a YAML file that must hold a mapping (cluster specs, sweep specs, price tables),
with one clear line for each way it can be wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_mapping(path: str | Path, error: type[Exception], expected: str) -> dict[str, Any]:
    """The mapping in ``path``; ``error`` (one line naming the file) when it cannot be
    read, is not YAML, or is not a mapping (``expected`` says what should be there)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise error(
            f"{path} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x}); "
            "save it as UTF-8"
        ) from None
    except yaml.YAMLError as exc:
        raise error(f"{path} is not valid YAML: {exc}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected {expected}")
    return data
