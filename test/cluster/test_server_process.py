"""Stopping a server's process group, as the supervisor (cluster) and a sweep's
deployments (compare) both do, on real processes: a leader that stops its child itself
on SIGINT, a group that ignores the signal until the grace period is over, and the
stragglers of a leader that has exited already."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import psutil
from sglang_engram.server_process import stop_group

# Prints its child's pid, then waits; on SIGINT it stops the child and exits 0 (as `cluster
# up` stops its workers). With "stubborn" both ignore SIGINT and SIGTERM.
LEADER = """
import signal, subprocess, sys
stubborn = sys.argv[1] == "stubborn"
child_code = "import signal, time\\n"
if stubborn:
    child_code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    child_code += "signal.signal(signal.SIGINT, signal.SIG_IGN)\\n"
child = subprocess.Popen([sys.executable, "-c", child_code + "print('ready', flush=True); time.sleep(600)"],
                         stdout=subprocess.PIPE, text=True)
child.stdout.readline()
def stop(signum, frame):
    child.terminate(); child.wait(); sys.exit(0)
if stubborn:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
else:
    signal.signal(signal.SIGINT, stop)
print(child.pid, flush=True)
if sys.argv[1] == "exit":
    sys.exit(3)
signal.pause()
"""


def _start(mode: str) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LEADER, mode], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    return proc, child


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_leader_that_stops_its_group_on_the_signal_stopped_on_it():
    proc, child = _start("polite")
    stopped = stop_group(proc, 60, sig=signal.SIGINT, leader_only=True)
    assert stopped.on_signal
    assert sorted(stopped.pids) == sorted([proc.pid, child])
    assert proc.returncode is not None and _gone(child)


def test_a_group_that_ignores_the_signal_is_killed_after_the_grace_period():
    proc, child = _start("stubborn")
    grace = random.uniform(0.5, 1.5)
    started = time.monotonic()
    stopped = stop_group(proc, grace)
    assert time.monotonic() - started >= grace
    assert not stopped.on_signal
    assert sorted(stopped.pids) == sorted([proc.pid, child])
    assert proc.returncode is not None and _gone(child)


def test_what_an_exited_leader_left_in_its_group_is_stopped():
    proc, child = _start("exit")
    assert proc.wait(timeout=60) == 3
    assert not _gone(child)  # the child lives on in the group
    stopped = stop_group(proc, 30)
    assert stopped.on_signal and stopped.pids == (child,)
    assert _gone(child) and proc.returncode == 3
