"""Where a running cluster is found: ``<home>/<name>/state.json``.

``up`` writes it before starting anything, so that ``status`` and ``down`` in another
process (or after a failed ``up``) find the Ray cluster, the namespace and the actor
names. The home is ``$SGLANG_ENGRAM_CLUSTER_HOME`` or ``~/.cache/sglang-engram/cluster``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

HOME_ENV = "SGLANG_ENGRAM_CLUSTER_HOME"
ROUTER_ACTOR = "router"


class ClusterNotFound(LookupError):
    """No state file for the named cluster."""


def cluster_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "sglang-engram" / "cluster")


def run_dir(name: str) -> Path:
    return cluster_home() / name


@dataclass(frozen=True)
class ClusterState:
    name: str
    namespace: str
    ray_address: str
    # True when `up` started its own local Ray: the cluster lives as long as that `up`.
    local_ray: bool
    up_pid: int
    detached: bool
    log_dir: str
    workers: tuple[str, ...]
    # RAY_AUTH_MODE that `up` talked to Ray with; `status`/`down` reuse it.
    ray_auth_mode: str | None = None
    router_url: str | None = None
    phase: str = "starting"  # starting | running | stopping
    plan: dict[str, Any] = field(default_factory=dict)

    @property
    def actor_names(self) -> list[str]:
        return [*self.workers, ROUTER_ACTOR]

    def placement_group_name(self, worker: str) -> str:
        return f"{self.namespace}/{worker}"

    @property
    def path(self) -> Path:
        return run_dir(self.name) / "state.json"

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.path)  # NOTE: atomic, so a reader never sees half a file

    def with_phase(self, phase: str, **changes: Any) -> ClusterState:
        new = replace(self, phase=phase, **changes)
        new.save()
        return new

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
        data["workers"] = tuple(data["workers"])
        return cls(**data)
