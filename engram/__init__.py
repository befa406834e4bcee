"""Core Engram library: DSv4.1-exact hashing, FP8 rows, table placements.

Imports torch (and numpy) only; nothing here imports SGLang.
"""

from engram.errors import EngramConfigError, EngramError, EngramInputError, EngramTableError
from engram.hashing import NgramHasher
from engram.spec import EngramSpec, has_engram

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


def __getattr__(name: str):  # noqa: ANN202 - module-level lazy attribute
    # NOTE: the token map needs `tokenizers`; importing it lazily keeps `import engram`
    # cheap for the kernels and the device checks.
    if name == "build_token_map":
        from engram.token_map import build_token_map

        return build_token_map
    raise AttributeError(name)
