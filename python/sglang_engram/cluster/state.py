"""Where a running cluster is found: ``<home>/<name>/state.json``.

``up`` writes it before starting anything, rewrites it with every member's status each
time it polls them, and removes it when it has stopped everything; ``status`` reads it
and ``down`` signals the ``up`` it names, from any shell on the same host. The home is
``$SGLANG_ENGRAM_CLUSTER_HOME`` or ``~/.cache/sglang-engram/cluster``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from engram.files import atomic_write
from sglang_engram.cluster.spec import ClusterError

HOME_ENV = "SGLANG_ENGRAM_CLUSTER_HOME"


class ClusterNotFound(ClusterError):
    """No state file for the named cluster."""


def run_dir(name: str) -> Path:
    home = os.environ.get(HOME_ENV) or Path.home() / ".cache" / "sglang-engram" / "cluster"
    return Path(home) / name


@dataclass(frozen=True)
class ClusterState:
    name: str
    ray_address: str
    local_ray: bool  # `up` started its own Ray, which ends with it
    up_pid: int
    up_started: float  # the `up` process's start time: tells it from a reused pid
    plan: dict[str, Any]  # ClusterPlan.to_dict(): the workers, the router, the log directory
    phase: str = "starting"  # starting | running | stopping
    # Each actor's last status as `up` polled it, and when (time.time()).
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    polled_at: float | None = None

    @property
    def up_alive(self) -> bool:
        """Whether the `up` that owns the cluster still runs (an exited one that its
        parent has not reaped yet is a zombie, not running)."""
        import psutil  # NOTE: the launcher checks its extra first; it holds psutil

        try:
            up = psutil.Process(self.up_pid)
            return up.create_time() == self.up_started and up.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def save(self) -> None:
        # NOTE: writers may overlap (two shells): atomic_write gives each its own temp file.
        atomic_write(_path(self.name), json.dumps(asdict(self), indent=2))

    def update(self, **changes: Any) -> ClusterState:
        new = replace(self, **changes)
        new.save()
        return new

    def with_members(self, statuses: dict[str, dict[str, Any]]) -> ClusterState:
        return self.update(members={**self.members, **statuses}, polled_at=time.time())

    def remove(self) -> None:
        _path(self.name).unlink(missing_ok=True)

    @classmethod
    def load(cls, name: str) -> ClusterState:
        try:
            return cls(**json.loads(_path(name).read_text()))
        except FileNotFoundError:
            raise ClusterNotFound(
                f"no cluster named {name!r} is known here (no {_path(name)}); "
                "was it started with `up`?"
            ) from None

    @classmethod
    def running(cls, name: str) -> ClusterState | None:
        """The cluster's state while its `up` runs; None, with the stale state dropped,
        once that `up` is gone (and everything it started with it)."""
        state = cls.load(name)
        if state.up_alive:
            return state
        state.remove()
        return None


def _path(name: str) -> Path:
    return run_dir(name) / "state.json"
