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

import psutil

from engram.files import atomic_write

HOME_ENV = "SGLANG_ENGRAM_CLUSTER_HOME"
ROUTER_ACTOR = "router"


class ClusterNotFound(LookupError):
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
    log_dir: str
    workers: tuple[str, ...]
    router_url: str | None = None
    phase: str = "starting"  # starting | running | stopping
    plan: dict[str, Any] = field(default_factory=dict)
    # Each actor's last status as `up` polled it, and when (time.time()).
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    polled_at: float | None = None

    @property
    def path(self) -> Path:
        return run_dir(self.name) / "state.json"

    @property
    def up_alive(self) -> bool:
        """Whether the `up` that owns the cluster still runs (an exited one that its
        parent has not reaped yet is a zombie, not running)."""
        try:
            up = psutil.Process(self.up_pid)
            return up.create_time() == self.up_started and up.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def save(self) -> None:
        # NOTE: writers may overlap (two shells): atomic_write gives each its own temp file.
        atomic_write(self.path, json.dumps(asdict(self), indent=2))

    def update(self, **changes: Any) -> ClusterState:
        new = replace(self, **changes)
        new.save()
        return new

    def with_members(self, statuses: dict[str, dict[str, Any]]) -> ClusterState:
        return self.update(members={**self.members, **statuses}, polled_at=time.time())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    @classmethod
    def load(cls, name: str) -> ClusterState:
        path = run_dir(name) / "state.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ClusterNotFound(
                f"no cluster named {name!r} is known here (no {path}); was it started with `up`?"
            ) from None
        return cls(**{**data, "workers": tuple(data["workers"])})
