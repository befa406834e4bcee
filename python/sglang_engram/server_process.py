"""A server process that ``cluster`` and ``compare`` start in a session of its own, so
that its process group is everything it starts: whether it answers (:func:`probe`), and
stopping it with all of that (:func:`stop_group`).

psutil is in the extras of both (``cluster``, ``compare``); nothing else imports this.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass

import psutil
import requests


@dataclass(frozen=True)
class StoppedGroup:
    pids: tuple[int, ...]  # the group's members when the stop began
    on_signal: bool  # every one of them exited on the signal, within the grace period


def probe(url: str, timeout_s: float = 3.0, headers: dict[str, str] | None = None) -> bool:
    """True when ``url`` answers 200 (asked with ``headers``)."""
    try:
        return requests.get(url, headers=headers, timeout=timeout_s).status_code == 200
    except requests.RequestException:
        return False


def stop_group(
    proc: subprocess.Popen[bytes],
    grace_s: float,
    *,
    sig: int = signal.SIGTERM,
    leader_only: bool = False,
) -> StoppedGroup:
    """Send ``sig`` to the group ``proc`` leads (or to ``proc`` alone, which then stops
    the rest itself), wait up to ``grace_s`` for the group to exit, SIGKILL what is left
    and reap ``proc``. Also for a leader that has exited already: its group may not have.
    """
    # NOTE: the group's id is the leader's pid, since the leader leads its own session.
    members = group_members(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        if leader_only:
            proc.send_signal(sig)  # a no-op once proc is reaped
        else:
            os.killpg(proc.pid, sig)
    alive = members
    try:
        _, alive = psutil.wait_procs(members, timeout=grace_s)
    finally:
        # NOTE: also when a second Ctrl-C cuts the wait short, and for anything that joined
        # the group after it was listed: nothing outlives the stop.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
        proc.wait()
    return StoppedGroup(tuple(p.pid for p in members), on_signal=not alive)


def group_members(pgid: int) -> list[psutil.Process]:
    """The processes of process group ``pgid``."""
    group = []
    for p in psutil.process_iter():
        with contextlib.suppress(OSError):
            if os.getpgid(p.pid) == pgid:
                group.append(p)
    return group
