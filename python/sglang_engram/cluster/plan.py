"""The resolved cluster: every worker's command line, node, GPUs and ports, and the router's.

``plan`` prints this without starting anything; ``up`` builds the same plan against the
live Ray cluster and runs it. Ports are fixed by the spec: worker k (in spec order) serves
on ``base_port + k``, the j-th prefill worker's bootstrap server on
``bootstrap_base_port + j``; ports are unique cluster-wide, so they never collide
wherever Ray puts the workers.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_engram.cluster.placement import Node, Slot, place
from sglang_engram.cluster.spec import ClusterSpec, WorkerGroup

# Replaces `python -m sglang.launch_server` in every worker's command; the CPU tests set
# it to a stand-in server, because SGLang cannot serve without a GPU.
WORKER_CMD_ENV = "SGLANG_ENGRAM_CLUSTER_WORKER_CMD"
BIND_HOST = "0.0.0.0"


@dataclass(frozen=True)
class WorkerPlan:
    name: str
    group: str
    role: str
    host: str
    gpus: float
    gpu_ids: tuple[int, ...]
    port: int
    bootstrap_port: int | None
    engram_offload: str
    argv: tuple[str, ...]
    log_path: str
    node_resource: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class RouterPlan:
    host: str
    port: int
    prometheus_port: int
    argv: tuple[str, ...]
    log_path: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterPlan:
    spec: ClusterSpec
    workers: tuple[WorkerPlan, ...]
    router: RouterPlan
    log_dir: str

    def to_dict(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "name": spec.name,
            "namespace": spec.namespace,
            "model": spec.model,
            "transfer_backend": spec.transfer_backend,
            "log_dir": self.log_dir,
            "warnings": list(spec.warnings),
            "workers": [
                {
                    "name": w.name,
                    "group": w.group,
                    "role": w.role,
                    "host": w.host,
                    "gpus": w.gpus,
                    "gpu_ids": list(w.gpu_ids),
                    "port": w.port,
                    "bootstrap_port": w.bootstrap_port,
                    "url": w.url,
                    "engram_offload": w.engram_offload,
                    "command": list(w.argv),
                    "log": w.log_path,
                }
                for w in self.workers
            ],
            "router": {
                "host": self.router.host,
                "port": self.router.port,
                "prometheus_port": self.router.prometheus_port,
                "url": self.router.url,
                "command": list(self.router.argv),
                "log": self.router.log_path,
            },
        }

    def render(self) -> str:
        spec = self.spec
        lines = [
            f"cluster {spec.name}: model {spec.model}, transfer backend {spec.transfer_backend}, "
            f"Ray namespace {spec.namespace}",
            "",
            f"{'NAME':<16} {'ROLE':<8} {'HOST':<16} {'GPUS':<10} {'PORT':<6} {'BOOTSTRAP':<9} ENGRAM",
        ]
        for w in self.workers:
            gpus = f"{w.gpus:g} [{','.join(map(str, w.gpu_ids))}]"
            boot = "-" if w.bootstrap_port is None else str(w.bootstrap_port)
            lines.append(
                f"{w.name:<16} {w.role:<8} {w.host:<16} {gpus:<10} {w.port:<6} {boot:<9} "
                f"{w.engram_offload}"
            )
        r = self.router
        lines.append(f"{'router':<16} {'router':<8} {r.host:<16} {'-':<10} {r.port:<6} {'-':<9} -")
        lines += [
            "",
            "GPU ids are planned; Ray picks the actual ids on each node.",
            "",
            "commands:",
        ]
        for w in self.workers:
            lines.append(f"  {w.name}: {shlex.join(w.argv)}")
        lines.append(f"  router: {shlex.join(r.argv)}")
        lines += ["", f"logs: {self.log_dir}"]
        lines += [f"warning: {w}" for w in spec.warnings]
        return "\n".join(lines)


def build_plan(
    spec: ClusterSpec, nodes: list[Node], *, router_host: str, log_dir: str
) -> ClusterPlan:
    """Place the workers on ``nodes`` and resolve every command line."""
    demands = [(name, g.gpus_per_worker) for g in spec.groups for name in g.worker_names]
    slots = place(demands, nodes)
    workers: list[WorkerPlan] = []
    k = j = 0
    for group in spec.groups:
        for name in group.worker_names:
            bootstrap = spec.bootstrap_base_port + j if group.role == "prefill" else None
            j += group.role == "prefill"
            workers.append(
                _worker(spec, group, name, slots[name], spec.base_port + k, bootstrap, log_dir)
            )
            k += 1
    router = RouterPlan(
        host=router_host,
        port=spec.router.port,
        prometheus_port=spec.router.prometheus_port,
        argv=tuple(router_argv(spec, workers)),
        log_path=str(Path(log_dir) / "router.log"),
    )
    return ClusterPlan(spec=spec, workers=tuple(workers), router=router, log_dir=log_dir)


def _worker(
    spec: ClusterSpec,
    group: WorkerGroup,
    name: str,
    slot: Slot,
    port: int,
    bootstrap: int | None,
    log_dir: str,
) -> WorkerPlan:
    argv = [*worker_prefix(), "--model-path", spec.model, "--host", BIND_HOST]
    argv += ["--port", str(port), "--tp-size", str(group.tp_size)]
    argv += ["--disaggregation-mode", group.role]
    argv += ["--disaggregation-transfer-backend", spec.transfer_backend]
    if bootstrap is not None:
        argv += ["--disaggregation-bootstrap-port", str(bootstrap)]
    # --enable-metrics: `status` reads the plugin's Engram gauges from /metrics.
    argv += [*group.engram_flags, "--enable-metrics", *group.extra_args]
    return WorkerPlan(
        name=name,
        group=group.name,
        role=group.role,
        host=slot.node.ip,
        gpus=group.gpus_per_worker,
        gpu_ids=slot.gpu_ids,
        port=port,
        bootstrap_port=bootstrap,
        engram_offload=group.engram_offload,
        argv=tuple(argv),
        log_path=str(Path(log_dir) / f"{name}.log"),
        node_resource=slot.node.resource,
    )


def worker_prefix() -> list[str]:
    override = os.environ.get(WORKER_CMD_ENV)
    if override:
        return shlex.split(override)
    return [sys.executable, "-m", "sglang.launch_server"]


def router_argv(spec: ClusterSpec, workers: list[WorkerPlan] | tuple[WorkerPlan, ...]) -> list[str]:
    """``sglang_router.launch_router`` in PD mode with every prefill and decode URL."""
    argv = [sys.executable, "-m", "sglang_router.launch_router", "--host", BIND_HOST]
    argv += ["--port", str(spec.router.port), "--pd-disaggregation"]
    for w in workers:
        if w.role == "prefill":
            argv += ["--prefill", w.url, str(w.bootstrap_port)]
    for w in workers:
        if w.role == "decode":
            argv += ["--decode", w.url]
    argv += ["--policy", spec.router.policy, "--prometheus-port", str(spec.router.prometheus_port)]
    # NOTE: at "info" the router logs every registration poll; extra_args may override.
    return [*argv, "--log-level", "warn", *spec.router.extra_args]
