"""Core Engram library: DSv4.1-exact hashing, FP8 rows, table placements.

Imports torch (and numpy) only; nothing here imports SGLang.
"""

from engram.errors import EngramConfigError, EngramError, EngramInputError, EngramTableError

__all__ = [
    "EngramConfigError",
    "EngramError",
    "EngramInputError",
    "EngramSpec",
    "EngramTableError",
    "NgramHasher",
    "build_token_map",
    "has_engram",
]

# NOTE: imported on first use, so that `import engram.errors` / `engram.files` /
# `engram.cli` stay cheap: a command line rejects bad flags before torch loads, and the
# token map needs `tokenizers`, which the kernels and the device checks do not.
_LAZY = {
    "NgramHasher": "engram.hashing",
    "EngramSpec": "engram.spec",
    "has_engram": "engram.spec",
    "build_token_map": "engram.token_map",
}


def __getattr__(name: str):  # noqa: ANN202 - module-level lazy attribute
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
