"""The SSD tier's compiled loops (numba): block hashes (:mod:`.xxh3`), read planning and
row gathers (:mod:`.plan`), the RAM row cache and read-ahead rows (:mod:`.cache`).

Each runs without the GIL and is compiled for one signature (:mod:`.types`) when its
module is imported, or loaded from numba's on-disk cache after the first time.
Importing numba alone costs about a second, so the submodules are imported on first use
(``kernels.plan.gather(...)``), not with ``engram.ssd``; :func:`compile_kernels`
(called when an SSD table opens) imports them all, so no request waits for a compiler.
"""

from __future__ import annotations

import importlib
import time
from types import ModuleType

SUBMODULES = ("cache", "plan", "xxh3")
startup_seconds = 0.0  # what compile_kernels took in this process (compile or cache load)


def __getattr__(name: str) -> ModuleType:
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compile_kernels() -> None:
    """Compile (or load) every kernel now; cheap after the first call in a process."""
    global startup_seconds
    started = time.perf_counter()
    for name in SUBMODULES:
        importlib.import_module(f"{__name__}.{name}")
    startup_seconds = startup_seconds or time.perf_counter() - started
