"""The soak's faults: SIGKILL or SIGSTOP of a PD cluster's prefill worker, decode worker or
router (or both workers at once), and when each was back.

SIGKILL goes to the component's server process, as the kernel's OOM killer or a
``kill -9`` sends it (SGLang's scheduler and detokenizer go with it, or the supervisor
stops them). SIGSTOP goes to its whole process group (the supervisor starts each server
in a session of its own), as when a machine or container freezes: every process of it
silent, none gone. What is running, and with which pid, is read from the
state file that the cluster's ``up`` rewrites every 2 s (what ``cluster status`` shows).
A fault is back when every member it hit runs again as a new process that answers its
health check and, for a worker, is registered with the router again.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from sglang_engram.cluster.state import ClusterState
from sglang_engram.cluster.status import collect_status

TARGETS = ("prefill", "decode", "router", "workers")  # workers: a prefill and a decode at once
SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}
DEFAULT_KINDS = tuple(f"{t}:{s}" for t in TARGETS[:3] for s in SIGNALS)


def check_kinds(kinds: list[str]) -> list[str]:
    """The fault kinds, each ``TARGET:SIGNAL``; a wrong one raises ValueError naming it."""
    for kind in kinds:
        target, _, sig = kind.partition(":")
        if target not in TARGETS or sig not in SIGNALS:
            raise ValueError(
                f"{kind!r} is not a fault: use TARGET:SIGNAL with TARGET one of "
                f"{', '.join(TARGETS)} and SIGNAL one of {', '.join(SIGNALS)}"
            )
    return kinds


@dataclass
class Fault:
    kind: str
    at: float  # time.time() when the signal was sent
    members: dict[str, int]  # name -> pid it hit
    down_at: float | None = None  # the cluster's state first showed a member not ready
    back_at: float | None = None  # every member running again (new process, registered)
    serving_at: float | None = None  # the first request sent after `at` that completed
    restarts: dict[str, int] = field(default_factory=dict)  # each member's, when it struck

    @property
    def back_s(self) -> float | None:
        return None if self.back_at is None else self.back_at - self.at

    @property
    def serving_s(self) -> float | None:
        return None if self.serving_at is None else self.serving_at - self.at

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at": self.at,
            "members": self.members,
            "down_s": None if self.down_at is None else self.down_at - self.at,
            "back_s": self.back_s,
            "serving_again_s": self.serving_s,
        }


class ClusterView:
    """The members of the running cluster ``name`` as its ``up`` last wrote them."""

    def __init__(self, name: str) -> None:
        self.name = name

    def status(self) -> dict[str, Any]:
        return collect_status(ClusterState.load(self.name))

    def members(self) -> dict[str, dict[str, Any]]:
        s = self.status()
        out = {"router": {**s["router"], "role": "router"}}
        out.update({w["name"]: w for w in s["workers"]})
        return out

    def ready(self, member: dict[str, Any]) -> bool:
        """Running, answering its health check and (a worker) registered."""
        registered = member.get("role") == "router" or bool(
            (member.get("router") or {}).get("registered")
        )
        return member.get("state") == "running" and bool(member.get("pid")) and registered


def targets(kind: str) -> tuple[str, ...]:
    target = kind.partition(":")[0]
    return ("prefill", "decode") if target == "workers" else (target,)


def strike(view: ClusterView, kind: str, rng: random.Random) -> Fault | None:
    """Send the fault's signal to one ready member of each role it names; None (nothing
    sent) while one of those roles has no ready member."""
    members = view.members()
    hit: dict[str, int] = {}
    for role in targets(kind):
        ready = [n for n, m in members.items() if m.get("role") == role and view.ready(m)]
        if not ready:
            return None
        name = rng.choice(sorted(ready))
        hit[name] = int(members[name]["pid"])
    sig = SIGNALS[kind.partition(":")[2]]
    at = time.time()
    for pid in hit.values():
        with contextlib.suppress(ProcessLookupError):  # NOTE: it died by itself just now
            os.kill(pid, sig) if sig == signal.SIGKILL else os.killpg(pid, sig)
    return Fault(kind, at, hit, restarts={n: int(members[n].get("restarts") or 0) for n in hit})


def update_back(view: ClusterView, faults: list[Fault]) -> None:
    """Note when each fault's members were first seen down (not running, or taken off
    the router) and mark each fault not yet back whose members all run again as new
    processes."""
    pending = [f for f in faults if f.back_at is None]
    if not pending:
        return
    members, now = view.members(), time.time()
    for fault in pending:
        if fault.down_at is None and any(
            name not in members or not view.ready(members[name]) or int(members[name]["pid"]) != pid
            for name, pid in fault.members.items()
        ):
            fault.down_at = now
        if all(
            name in members
            and view.ready(members[name])
            and int(members[name]["pid"]) != pid
            and int(members[name].get("restarts") or 0) > fault.restarts.get(name, 0)
            for name, pid in fault.members.items()
        ):
            fault.back_at = now
            fault.down_at = fault.down_at or now


def release(faults: list[Fault]) -> None:
    """SIGCONT every process group a fault stopped that is still there (a soak ended
    early: nothing it froze stays frozen)."""
    for fault in faults:
        if fault.kind.endswith(":stop"):
            for pid in fault.members.values():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGCONT)
