"""The ``/dev/shm`` files a server's processes hold, removed once they are all gone.

NOTE: SGLang's scheduler keeps its load snapshot in ``/dev/shm/sglang_loads_*.shm``
(16 KiB) and Python's multiprocessing its named semaphores in ``/dev/shm/sem.*``; both
are unlinked only on a clean exit, so every killed server leaves them behind (SGLang's own
sweep runs only in its CI). A supervisor that restarts killed servers for months would
fill the tmpfs; it removes what each incarnation held instead. The names are unique to
that incarnation, so nothing else uses them once its process group has ended.
"""

from __future__ import annotations

import contextlib
import os

import psutil

SHM_DIR = "/dev/shm/"


def held(pid: int) -> set[str]:
    """The ``/dev/shm`` files that process ``pid`` and its descendants map or have open."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return set()
    paths: set[str] = set()
    for p in procs:
        with contextlib.suppress(psutil.Error):
            paths |= {m.path for m in p.memory_maps(grouped=True)}
            paths |= {f.path for f in p.open_files()}
    return {p for p in paths if p.startswith(SHM_DIR) and "/" not in p[len(SHM_DIR) :]}


def remove(paths: set[str]) -> list[str]:
    """Unlink ``paths`` (those still there); the ones removed."""
    removed = []
    for path in sorted(paths):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed
