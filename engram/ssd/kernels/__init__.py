"""The SSD tier's compiled loops (numba): block hashes (:mod:`.xxh3`), read planning and
row gathers (:mod:`.plan`), the RAM row cache and read-ahead rows (:mod:`.cache`).

Each runs without the GIL. Importing numba costs about a second here, so the
submodules are imported on first use (``kernels.plan.gather(...)``), not with
``engram.ssd``; :func:`compile_kernels` (called when an SSD table opens) compiles or,
after the first time, loads from numba's on-disk cache every kernel for the argument
types the read path passes, so no request waits for a compiler.
"""

from __future__ import annotations

import importlib
from types import ModuleType

SUBMODULES = ("cache", "plan", "xxh3")


def __getattr__(name: str) -> ModuleType:
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compile_kernels() -> None:
    """Compile (or load) every kernel for the types the read path uses, once per process."""
    from engram.ssd.kernels.warm_up import warm_up

    warm_up()
