"""The resolved cluster: every worker's command line, node and ports, and the router's.

``plan`` prints this without starting anything; ``up`` builds the same plan against the
live Ray cluster and runs it. Worker k (in spec order) serves on ``base_port + k``, the
j-th prefill worker's bootstrap server on ``bootstrap_base_port + j``: ports are unique
cluster-wide, so they never collide wherever the workers run.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sglang_engram.cluster.assignment import Node, assign_nodes, spread_nodes
from sglang_engram.cluster.ports import ephemeral_warning
from sglang_engram.cluster.spec import WORKER_FIELD, ClusterSpec, WorkerGroup
from sglang_engram.cluster.state import run_dir
from sglang_engram.integration.cpu_serving import CPU_ENGINE_VAR

BIND_HOST = "0.0.0.0"
# NOTE: SGLang's CPU engine sizes its KV pool at ~72 % of free host memory (30 s to
# allocate 15 GB); a CPU worker gets this many tokens unless its extra_args say otherwise.
CPU_KV_TOKENS = 32768


@dataclass(frozen=True)
class ProcessPlan:
    host: str
    port: int
    command: tuple[str, ...]
    log: str
    env: dict[str, str] = field(default_factory=dict, kw_only=True)  # set on top of the node's

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def shell(self) -> str:
        """The command as one shell line, its environment in front."""
        return shlex.join([*(f"{k}={v}" for k, v in self.env.items()), *self.command])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "url": self.url, "command": list(self.command)}


@dataclass(frozen=True)
class WorkerPlan(ProcessPlan):
    name: str
    role: str
    node_id: str | None
    gpus: float
    bootstrap_port: int | None
    engram_offload: str

    def to_dict(self) -> dict[str, Any]:
        gpus = int(self.gpus) if self.gpus == int(self.gpus) else self.gpus
        return {**super().to_dict(), "gpus": gpus}


@dataclass(frozen=True)
class ClusterPlan:
    spec: ClusterSpec
    workers: tuple[WorkerPlan, ...]
    router: ProcessPlan
    log_dir: str

    def ports_of(self, name: str) -> dict[str, int]:
        """The ports member ``name`` (a worker, or ``router``) binds, by what each is."""
        if name == "router":
            return {"port": self.router.port, "prometheus_port": self.spec.router.prometheus_port}
        (w,) = [w for w in self.workers if w.name == name]
        return {"port": w.port} | ({"bootstrap_port": w.bootstrap_port} if w.bootstrap_port else {})

    @property
    def ports(self) -> dict[str, int]:
        """Every port the cluster binds, by its member and what it is."""
        names = [*(w.name for w in self.workers), "router"]
        return {f"{n} {k}": p for n in names for k, p in self.ports_of(n).items()}

    @property
    def warnings(self) -> list[str]:
        """The spec's, and ports that an outgoing connection may take on this machine."""
        return [*self.spec.warnings, *filter(None, [ephemeral_warning(self.ports)])]

    def to_dict(self) -> dict[str, Any]:
        s = self.spec
        return {
            "name": s.name,
            "namespace": s.namespace,
            "model": s.model,
            "device": s.device,
            "transfer_backend": s.transfer_backend,
            "log_dir": self.log_dir,
            "warnings": self.warnings,
            "workers": [w.to_dict() for w in self.workers],
            "router": self.router.to_dict(),
        }

    def render(self) -> str:
        s, r = self.spec, self.router
        lines = [
            f"cluster {s.name}: model {s.model}, device {s.device}, "
            f"transfer backend {s.transfer_backend}, "
            f"Ray namespace {s.namespace}",
            "",
            f"{'NAME':<16} {'ROLE':<8} {'HOST':<16} {'GPUS':<5} {'PORT':<6} {'BOOTSTRAP':<9} ENGRAM",
        ]
        for w in self.workers:
            boot = "-" if w.bootstrap_port is None else str(w.bootstrap_port)
            lines.append(
                f"{w.name:<16} {w.role:<8} {w.host:<16} {w.gpus:<5g} {w.port:<6} "
                f"{boot:<9} {w.engram_offload}"
            )
        lines.append(f"{'router':<16} {'router':<8} {r.host:<16} {'-':<5} {r.port:<6} {'-':<9} -")
        lines += ["", "commands:"]
        lines += [f"  {w.name}: {w.shell}" for w in self.workers]
        lines += [f"  router: {r.shell}", "", f"logs: {self.log_dir}"]
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])


def build_plan(
    spec: ClusterSpec, nodes: list[Node], *, router_host: str, log_dir: str | None = None
) -> ClusterPlan:
    """Assign the workers to ``nodes`` and resolve every command line; the logs go to
    ``log_dir``, else the spec's, else the cluster's run directory."""
    log_dir = log_dir or spec.log_dir or str(run_dir(spec.name) / "logs")
    names = [(name, g) for g in spec.workers for name in g.worker_names]
    cpu = spec.device == "cpu"
    if cpu:
        assigned = spread_nodes([name for name, _ in names], nodes)
    else:
        assigned = assign_nodes([(name, g.gpus_per_worker) for name, g in names], nodes)
    workers: list[WorkerPlan] = []
    for k, (name, group) in enumerate(names):
        port, bootstrap = spec.base_port + k, None
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", spec.model]
        argv += ["--host", BIND_HOST, "--port", str(port), *(_cpu_args(group) if cpu else [])]
        argv += ["--tp-size", str(group.tp_size), "--disaggregation-mode", group.role]
        argv += ["--disaggregation-transfer-backend", spec.transfer_backend]
        if group.role == "prefill":
            bootstrap = spec.bootstrap_base_port + sum(w.role == "prefill" for w in workers)
            argv += ["--disaggregation-bootstrap-port", str(bootstrap)]
        # --enable-metrics: `status` reads the plugin's Engram gauges from /metrics.
        engram = [flag.replace(WORKER_FIELD, name) for flag in group.engram_flags]
        argv += [*engram, "--enable-metrics", *group.extra_args]
        node = assigned[name]
        workers.append(
            WorkerPlan(
                host=node.ip,
                port=port,
                command=tuple(argv),
                log=str(Path(log_dir) / f"{name}.log"),
                name=name,
                role=group.role,
                env={**({CPU_ENGINE_VAR: "1"} if cpu else {}), **spec.timeouts.worker_env},
                node_id=node.node_id,
                gpus=0 if cpu else group.gpus_per_worker,
                bootstrap_port=bootstrap,
                engram_offload=group.engram_offload,
            )
        )
    router_argv = tuple(_router_argv(spec, workers))
    router = ProcessPlan(
        router_host, spec.router.port, router_argv, str(Path(log_dir) / "router.log")
    )
    return ClusterPlan(spec=spec, workers=tuple(workers), router=router, log_dir=log_dir)


def _cpu_args(group: WorkerGroup) -> list[str]:
    """SGLang's CPU engine (with CPU_ENGINE_VAR in the environment), a small KV pool, and
    ``--sleep-on-idle`` (an idle CPU scheduler otherwise spins a core)."""
    flags = {a.split("=", 1)[0] for a in group.extra_args}
    pool = [] if "--max-total-tokens" in flags else ["--max-total-tokens", str(CPU_KV_TOKENS)]
    return ["--device", "cpu", *pool, "--sleep-on-idle"]


def _router_argv(spec: ClusterSpec, workers: list[WorkerPlan]) -> list[str]:
    """The sglang-router in PD mode with every prefill and decode URL (``router_main``:
    ``sglang_router.launch_router``'s arguments, started without its slow imports)."""
    argv = [sys.executable, "-m", "sglang_engram.cluster.router_main", "--host", BIND_HOST]
    argv += ["--port", str(spec.router.port), "--pd-disaggregation"]
    for w in workers:
        argv += ["--prefill", w.url, str(w.bootstrap_port)] if w.role == "prefill" else []
    argv += [a for w in workers if w.role == "decode" for a in ("--decode", w.url)]
    argv += ["--policy", spec.router.policy, "--prometheus-port", str(spec.router.prometheus_port)]
    argv += spec.timeouts.router_args
    argv += [] if spec.router.circuit_breaker else ["--disable-circuit-breaker"]
    # NOTE: defaults that extra_args may override (the last of a flag wins). At "info" the
    # router logs every registration poll. No retries: a retried PD request pairs a new
    # prefill with a decode worker that may be the one that just died (it is deregistered
    # ~2 s later); without retries the client gets the decode worker's error at once.
    return [*argv, "--log-level", "warn", "--retry-max-retries", "1", *spec.router.extra_args]
