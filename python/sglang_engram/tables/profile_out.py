"""``--engram-profile-out``: one writer of the served profile per output file, kept in
the runtime, written at interpreter exit and on SIGTERM.

Every table a process serves counts its lookups into a tally of the writer of its file
(:class:`engram.profile.upkeep.ProfileUpkeep`, which writes on its own thread while the
server runs). :func:`upkeep_for` makes the writer on a table's first call and, on the
process's first, sets up the last writes: at exit and on SIGTERM (the handler writes,
then the signal takes its previous course). Both close the writers the runtime holds
*then*, so a :meth:`~sglang_engram.protocol.runtime.EngramRuntime.reset` (which closes
the old ones itself) leaves nothing unwritten.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from engram.profile.identity import HashIdentity
from engram.profile.upkeep import ProfileUpkeep
from sglang_engram.protocol.runtime import EngramRuntime

logger = logging.getLogger(__name__)


def upkeep_for(
    runtime: EngramRuntime, path: str | Path, identity: Callable[[], HashIdentity]
) -> ProfileUpkeep:
    """``runtime``'s writer of ``path`` (made on the first call, with ``identity()``)."""
    path = Path(path).absolute()
    state = runtime.profile_out
    with state.lock:
        upkeep = state.upkeeps.get(path)
        if upkeep is None:
            upkeep = state.upkeeps[path] = ProfileUpkeep(path, identity())
    with runtime.lock:
        if not runtime.exit_writes:
            runtime.exit_writes = True
            _close_at_exit(runtime)
    return upkeep


def close_all(runtime: EngramRuntime) -> None:
    """Close every writer ``runtime`` holds (each writes what came since its last write)."""
    state = runtime.profile_out
    with state.lock:
        upkeeps = list(state.upkeeps.values())
    for upkeep in upkeeps:
        try:
            upkeep.close()
        except OSError as err:
            logger.warning("served profile: writing %s failed: %s", upkeep.path, err)


def _close_at_exit(runtime: EngramRuntime) -> None:
    atexit.register(close_all, runtime)
    if threading.current_thread() is not threading.main_thread():
        logger.warning("served profile: not written on SIGTERM (set up off the main thread)")
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        close_all(runtime)
        signal.signal(signum, previous)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
