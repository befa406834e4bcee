"""The extras of ``sglang-engram`` that a command needs (pyproject.toml's
``[project.optional-dependencies]``): what each brings to import, and the one line a
command gives, before it imports any of it, when one is missing.

The plugin itself needs none of them.
"""

from __future__ import annotations

import importlib.util

from engram.errors import EngramRunError

# extra -> {module our code imports: the distribution that brings it}
EXTRAS = {
    "cluster": {"ray": "Ray", "sglang_router": "sglang-router", "psutil": "psutil"},
    "compare": {"scipy": "scipy", "matplotlib": "matplotlib", "psutil": "psutil"},
}


class MissingExtra(EngramRunError):
    """A command's extra is not installed; the message names what and how to install it."""


def require_extra(extra: str, command: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extra`` can be imported;
    ``command`` names what needs it ("the cluster launcher")."""
    missing = [package for module, package in EXTRAS[extra].items() if not _importable(module)]
    if missing:
        names = " and ".join([", ".join(missing[:-1]), missing[-1]] if missing[:-1] else missing)
        raise MissingExtra(f"{command} needs {names}: pip install 'sglang-engram[{extra}]'")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
