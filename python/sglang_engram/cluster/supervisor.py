"""Run one server process, watch its health, restart it with backoff when it dies or hangs.

One thread owns the process from spawn to kill: it starts it, polls its health URL,
SIGKILLs its whole group when it hangs (no answer for ``hang_timeout_s`` after having
answered, or none ``start_timeout_s`` after its start: a stopped or deadlocked process
never exits by itself), restarts it after ``RestartPolicy.delay`` when it exits, gives
up after ``max_restarts`` in a row (state ``failed``) and, on ``stop``, terminates the
whole process tree. Whatever an incarnation held in ``/dev/shm`` is removed once its
group has ended (``shm_files``). A port of the process that another process holds fails
it at once (``failed``, the port and its holder named): checked before each start, and
watched for in its log until it first answers (SGLang, its HTTP port taken, does not
exit). The process runs in a session of its own so that its children (SGLang's
scheduler and detokenizer) are stopped with it, and (on Linux) is killed by the kernel
if the supervising process dies without stopping it.

Secrets (the cluster's keys) stay out of its command line and its log (``redaction``):
it reads them from a private ``--config`` file made for each start and removed once it
has answered its health check (it has read its config by then) or has ended.
"""

from __future__ import annotations

import collections
import contextlib
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from sglang_engram.cluster import ports, shm_files
from sglang_engram.cluster.incarnation import Incarnation, ProcessCommand, kill_hung
from sglang_engram.server_process import probe, stop_group

PROBE_EVERY_S = 1.0  # how often health is asked
SHM_LOOK_S = 30.0  # how often a healthy process's /dev/shm files are listed
# How long a restart waits for its ports to be free (its predecessor's may be closing).
PORT_GRACE_S = 10.0

# States: starting (spawned, health not yet answered), running (healthy), unhealthy (alive,
# its health check fails after having passed; killed as hung after hang_timeout_s),
# restarting (dead, waiting out the backoff), failed (gave up after max_restarts in a
# row, or could not be spawned), stopped (on request).


class ProcessSupervisor:
    def __init__(self, command: ProcessCommand) -> None:
        self.command = command
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.state = "stopped"  # written under _lock by the owning thread
        self.restarts = 0  # in all: the incarnation the router registration follows
        self._in_a_row = 0  # restarts since the process last stayed healthy reset_after_s
        self._hung_kills = 0
        self._exit_codes: list[int] = []
        self._started_at: float | None = None
        self._killed_pids: list[int] = []
        self._error: str | None = None
        self._shm: set[str] = set()  # /dev/shm files the current incarnation held
        self._incarnation: Incarnation | None = None

    def start(self) -> None:
        self.state = "starting"
        self._thread = threading.Thread(target=self._run, name=self.command.name, daemon=True)
        self._thread.start()

    def stop(self) -> list[int]:
        """Stop the process tree (TERM, then KILL after the grace period); return its pids."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.command.stop_grace_s + 15)
        with self._lock:
            if self.state != "failed":
                self.state = "stopped"
            return list(self._killed_pids)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            proc = self._proc
            return {
                "state": self.state,
                "pid": proc.pid if proc is not None and proc.poll() is None else None,
                "restarts": self.restarts,
                "restarts_in_a_row": self._in_a_row,
                "max_restarts": self.command.restart.max_restarts,
                "hung_kills": self._hung_kills,
                "exit_codes": list(self._exit_codes),
                "uptime_s": None if self._started_at is None else time.time() - self._started_at,
                "log": self.command.log_path,
                "error": self._error,
            }

    def log_tail(self, lines: int = 20) -> list[str]:
        try:
            with open(self.command.log_path, errors="replace") as f:
                return [line.rstrip("\n") for line in collections.deque(f, lines)]
        except OSError:
            return []

    def _run(self) -> None:
        while True:
            if taken := self._port_in_use():
                # NOTE: failed, not restarted (a restart only gives its predecessor's
                # ports PORT_GRACE_S): a port that another process holds is not freed
                # by waiting out a backoff, nor taken over.
                self._fail(taken)
                return
            if self._stop.is_set():
                return
            log = ports.BindWatch(self.command.log_path, self.command.ports)
            try:
                proc = self._spawn()
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                # NOTE: a command that cannot run will not run after a backoff either.
                self._fail(f"cannot start: {exc}")
                return
            code = self._watch(proc, log)
            if code is None:  # stop requested; the tree is already down
                self._ended()
                return
            stop_group(proc, 5.0)  # what it left behind (children without a death signal)
            self._ended()
            if isinstance(code, _PortTaken):
                self._fail(f"port {code.port} was taken while it started, {code.by}")
                return
            with self._lock:
                self._exit_codes.append(code)
                if self._in_a_row >= self.command.restart.max_restarts:
                    self.state = "failed"
                    self._error = (
                        f"exited with {code}; gave up after {self._in_a_row} restarts in a row"
                    )
                    self._log(self._error)
                    return
                self.restarts += 1
                self._in_a_row += 1
                self.state = "restarting"
                delay = self.command.restart.delay(self._in_a_row)
            self._log(f"exited with {code}; restart {self.restarts} in {delay:g}s")
            if self._stop.wait(delay):
                return
            with self._lock:
                self.state = "starting"

    def _fail(self, error: str) -> None:
        with self._lock:
            self.state, self._error = "failed", error
        self._log(error)

    def _port_in_use(self) -> str | None:
        """Why the process cannot start now, a port of it being taken, or None; a restart
        gives its predecessor's ports ``PORT_GRACE_S`` to close."""
        deadline = time.monotonic() + (PORT_GRACE_S if self.restarts else 0.0)
        while taken := next((p for p in self.command.ports if ports.in_use(p)), None):
            if time.monotonic() >= deadline:
                return f"port {taken} is in use on this node, {ports.holder(taken)}"
            if self._stop.wait(0.5):
                return None  # NOTE: _run sees the stop before it spawns
        return None

    def _spawn(self) -> subprocess.Popen[bytes]:
        self._incarnation = Incarnation.spawn(self.command, self._log)
        with self._lock:
            self._proc = self._incarnation.proc
            self._started_at = time.time()
        return self._incarnation.proc

    def _drop_config(self) -> None:
        if self._incarnation is not None:
            self._incarnation.drop_config()

    def _ended(self) -> None:
        """After an incarnation's group has ended: its config, its last output, its /dev/shm."""
        if self._incarnation is not None:
            self._incarnation.ended()
            self._incarnation = None
        self._remove_shm()

    def _watch(
        self, proc: subprocess.Popen[bytes], log: ports.BindWatch
    ) -> int | _PortTaken | None:
        """Poll health once a second until the process exits (its code), hangs (it is
        SIGKILLed: -9), logs that a port of it was taken before it first answered (it
        is SIGKILLed) or stop is requested (None)."""
        policy, started = self.command.restart, time.monotonic()
        last_ok: float | None = None  # when health last answered
        healthy_since: float | None = None  # the first answer of the current healthy run
        next_shm_look = started
        while (code := proc.poll()) is None:
            if self._stop.is_set():
                self._log("stopping")
                stopped = stop_group(proc, self.command.stop_grace_s)
                with self._lock:
                    self._killed_pids = list(stopped.pids)
                return None
            healthy = probe(self.command.health_url, policy.probe_timeout_s)
            now = time.monotonic()
            last_ok = now if healthy else last_ok
            healthy_since = (healthy_since or now) if healthy else None
            if healthy and now >= next_shm_look:
                self._shm |= shm_files.held(proc.pid)
                next_shm_look = now + SHM_LOOK_S
            if healthy:
                self._drop_config()
            with self._lock:
                if healthy and self.state in ("starting", "unhealthy"):
                    self.state = "running"
                elif not healthy and self.state == "running":
                    self.state = "unhealthy"
                if healthy_since is not None and now - healthy_since >= policy.reset_after_s:
                    self._in_a_row = 0
            if last_ok is None and (port := log.failed_port()):
                by = ports.holder(port)
                self._log(f"port {port} was taken while it started, {by}; killing it")
                kill_hung(proc.pid)
                proc.wait()
                return _PortTaken(port, by)
            if hung := policy.hung(now - started, None if last_ok is None else now - last_ok):
                self._log(f"{hung}; killing it")
                with self._lock:
                    self._hung_kills += 1
                kill_hung(proc.pid)
                return proc.wait()
            self._stop.wait(PROBE_EVERY_S)
        return code

    def _remove_shm(self) -> None:
        """Remove the /dev/shm files of the incarnation whose process group has ended."""
        if removed := shm_files.remove(self._shm):
            self._log(f"removed what it left in /dev/shm: {', '.join(removed)}")
        self._shm = set()

    def _log(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError):  # an unwritable log is reported by _spawn
            with open(self.command.log_path, "a") as f:
                f.write(f"=== [{stamp}] supervisor: {self.command.name} {message}\n")


@dataclass(frozen=True)
class _PortTaken:
    """How an incarnation ended that could not bind ``port``, held by ``by``."""

    port: int
    by: str
