"""The cluster spec: the model, the transfer backend, the router and groups of prefill /
decode workers, as read from YAML by :mod:`sglang_engram.cluster.spec_loader`.

A spec is pure data; where each worker runs and which ports it gets is the plan's job
(:mod:`sglang_engram.cluster.plan`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sglang_engram.cluster.supervisor import RestartPolicy
from sglang_engram.config import DEFAULT_OFFLOAD
from sglang_engram.flags import ENGRAM_FLAGS

ROLES = ("prefill", "decode")
# NOTE: SGLang 0.5.23's names; mooncake_tcp is mooncake without RDMA.
TRANSFER_BACKENDS = ("mooncake", "mooncake_tcp", "nixl", "fake")
# NOTE: mirrors the plugin's --engram-offload choices (engram.tables.PLACEMENTS); kept
# here so that reading a spec imports no torch. test_spec checks the two agree.
ENGRAM_OFFLOADS = ("hbm", "dram", "ssd", "off")
ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
# Flags the launcher sets itself; a group's extra_args may not set them.
MANAGED_WORKER_FLAGS = (
    "--model-path",
    "--model",
    "--host",
    "--port",
    "--tp-size",
    "--tensor-parallel-size",
    "--disaggregation-mode",
    "--disaggregation-transfer-backend",
    "--disaggregation-bootstrap-port",
    *ENGRAM_FLAGS,
)
MANAGED_ROUTER_FLAGS = (
    "--host",
    "--port",
    "--pd-disaggregation",
    "--prefill",
    "--decode",
    "--worker-urls",
    "--policy",
    "--prometheus-port",
)
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class ClusterSpecError(ValueError):
    """The spec file is missing, malformed or asks for something impossible."""


@dataclass(frozen=True)
class WorkerGroup:
    """``count`` identical SGLang servers of one role."""

    name: str
    role: str
    count: int = 1
    tp_size: int = 1
    gpus_per_worker: float = 1
    engram_offload: str = DEFAULT_OFFLOAD
    engram_ssd_dir: str | None = None
    engram_prefetch: bool | None = None
    engram_hot_cache_gb: float | None = None
    engram_ram_cache_gb: float | None = None
    extra_args: tuple[str, ...] = ()

    @property
    def worker_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]

    @property
    def engram_flags(self) -> list[str]:
        """The plugin's flags for this group (only those the spec sets)."""
        flags = ["--engram-offload", self.engram_offload]
        if self.engram_ssd_dir is not None:
            flags += ["--engram-ssd-dir", self.engram_ssd_dir]
        if self.engram_prefetch is not None:
            flags.append("--engram-prefetch" if self.engram_prefetch else "--no-engram-prefetch")
        if self.engram_hot_cache_gb is not None:
            flags += ["--engram-hot-cache-gb", _num(self.engram_hot_cache_gb)]
        if self.engram_ram_cache_gb is not None:
            flags += ["--engram-ram-cache-gb", _num(self.engram_ram_cache_gb)]
        return flags


@dataclass(frozen=True)
class RouterSpec:
    port: int = 8000
    policy: str = "cache_aware"
    prometheus_port: int = 29000
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    model: str
    transfer_backend: str
    groups: tuple[WorkerGroup, ...]
    router: RouterSpec = field(default_factory=RouterSpec)
    base_port: int = 30000
    bootstrap_base_port: int = 8998
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    log_dir: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def namespace(self) -> str:
        """The Ray namespace every actor and placement group of this cluster lives in."""
        return f"sglang-engram-{self.name}"

    @property
    def num_workers(self) -> int:
        return sum(g.count for g in self.groups)


def _num(value: float) -> str:
    return f"{value:g}"
