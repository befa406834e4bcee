"""One incarnation of a supervised server process: what it runs (``ProcessCommand``),
started in a session of its own that the kernel kills if its supervisor dies, its secrets
read from a private ``--config`` file and kept out of its log (``redaction``), and its
group SIGKILLed when it hangs."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from sglang_engram.cluster.recovery import RestartPolicy
from sglang_engram.cluster.redaction import copy_redacted, private_config
from sglang_engram.server_process import group_members


@dataclass(frozen=True)
class ProcessCommand:
    """What a supervisor runs: a command line, its log, its health URL, how to restart it."""

    name: str
    argv: tuple[str, ...]
    log_path: str
    health_url: str
    ports: tuple[int, ...] = ()  # the TCP ports it binds, checked before each start
    env: dict[str, str] = field(default_factory=dict)  # on top of the actor's environment
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    stop_grace_s: float = 15.0
    # Flags read from the private --config file, and what its log must never show.
    private_config: dict[str, Any] = field(default_factory=dict, repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)


@dataclass
class Incarnation:
    """A started process of a command: its private config file until it is read, and the
    thread copying its output into its log, redacted, when it has secrets."""

    proc: subprocess.Popen[bytes]
    config: str | None = None
    copier: threading.Thread | None = None

    @classmethod
    def spawn(cls, command: ProcessCommand, log: Callable[[str], None]) -> Incarnation:
        Path(command.log_path).parent.mkdir(parents=True, exist_ok=True)
        argv, config = list(command.argv), None
        if command.private_config:
            config = private_config(command.name, command.private_config)
            argv += ["--config", config]
        log(f"start: {shlex.join([*(f'{k}={v}' for k, v in command.env.items()), *argv])}")
        secrets = command.secrets
        with open(command.log_path, "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if secrets else out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **command.env},
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        copier = None
        if secrets:
            assert proc.stdout is not None
            args = (proc.stdout, command.log_path, secrets)
            copier = threading.Thread(target=copy_redacted, args=args, daemon=True)
            copier.start()
        return cls(proc, config, copier)

    def drop_config(self) -> None:
        """Remove the private config file (read once the process answers, or it ended)."""
        if self.config is not None:
            Path(self.config).unlink(missing_ok=True)
            self.config = None

    def ended(self) -> None:
        """After its group has ended: its config file, the rest of its output."""
        self.drop_config()
        if self.copier is not None:
            self.copier.join(5.0)  # NOTE: its output ends when its group has
            self.copier = None


def kill_hung(pgid: int) -> None:
    """SIGKILL the hung group ``pgid`` leads, all but multiprocessing's resource tracker.

    NOTE: SIGKILL at once: a stopped process does not act on SIGTERM, and a hung one will
    not finish its requests; its clients get their errors now. The resource tracker
    unlinks the group's named semaphores (``/dev/shm/sem.mp-*``) once the processes that
    use them are gone, and exits; killed with them it cannot. It is spared and woken (the
    whole group may have been stopped), and the supervisor's ``stop_group`` gives it a few
    seconds before it kills what is left. Signals by pid: psutil's wait would reap the
    leader, whose exit code the caller reads.
    """
    for p in group_members(pgid):
        with contextlib.suppress(psutil.Error):
            if not any("multiprocessing.resource_tracker" in a for a in p.cmdline()):
                p.send_signal(signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGCONT)


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1
_SIGKILL = int(signal.SIGKILL)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when the thread that spawned it ends.

    NOTE: the death signal follows the spawning *thread*; the owner thread spawns every
    incarnation and ends only after stopping it, so this fires only when the actor
    process itself dies (killed by Ray, or its node's Ray shutting down). It runs in the
    forked child of a threaded process, so it makes one pre-resolved libc call, nothing else.
    """
    assert _LIBC is not None
    _LIBC.prctl(_PR_SET_PDEATHSIG, _SIGKILL)
