"""Read a YAML file that must hold a mapping (cluster specs, sweep specs, price tables),
with one clear line for each way it can be wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What the parser found and where, in one line (without its source excerpt)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


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
        raise error(f"{path} is not valid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected {expected}")
    return data
