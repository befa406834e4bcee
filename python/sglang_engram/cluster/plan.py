"""The resolved cluster: every worker's command line, node and ports, and the router's.

``plan`` prints this without starting anything; ``up`` builds the same plan against the
live Ray cluster and runs it. Worker k (in spec order) serves on ``base_port + k``, the
j-th prefill worker's bootstrap server on ``bootstrap_base_port + j``: ports are unique
cluster-wide, so they never collide wherever the workers run.

A worker binds, and advertises for the KV transfer, its node's address as Ray knows it
(``--host``, and ``SGLANG_HOST_IP``: SGLang would otherwise guess it from the route to
the internet, which a closed cluster network does not have and a host with several
networks may send out the wrong one). The keys are not in the plan (``keys``).
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sglang_engram.cluster.assignment import Demand, Node, Placed, assign_nodes, spread_nodes
from sglang_engram.cluster.keys import key_files
from sglang_engram.cluster.ports import ephemeral_warning
from sglang_engram.cluster.spec import WORKER_FIELD, ClusterSpec, WorkerGroup
from sglang_engram.cluster.state import run_dir
from sglang_engram.integration.cpu_serving import CPU_ENGINE_VAR

BIND_HOST = "0.0.0.0"  # the router's: clients may come from any network
HOST_IP_VAR = "SGLANG_HOST_IP"  # SGLang's: the address its KV transfer binds and advertises
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

    def worker(self, name: str) -> WorkerPlan:
        (w,) = [w for w in self.workers if w.name == name]
        return w

    def demand(self, name: str) -> Demand:
        """What worker ``name`` needs of a node: its GPUs and its group's pins."""
        return Demand.of(name, self._group(name), self.worker(name).gpus)

    def place(self, name: str, nodes: list[Node], placed: Placed) -> WorkerPlan:
        """Worker ``name`` planned again, on one of ``nodes`` (the others ``placed``);
        raises ClusterSpecError when none fits."""
        w = self.worker(name)
        assign = spread_nodes if self.spec.device == "cpu" else assign_nodes
        node = assign([self.demand(name)], nodes, placed=placed)[name]
        return _worker(
            self.spec, name, self._group(name), node, w.port, w.bootstrap_port, self.log_dir
        )

    def _group(self, name: str) -> WorkerGroup:
        (group,) = [g for g in self.spec.workers if name in g.worker_names]
        return group

    def ports_of(self, name: str) -> dict[str, int]:
        """The ports member ``name`` (a worker, or ``router``) binds, by what each is."""
        if name == "router":
            return {"port": self.router.port, "prometheus_port": self.spec.router.prometheus_port}
        w = self.worker(name)
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
            "client_key_file": str(key_files(s)[1]),
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
            f"{'NAME':<16} {'ROLE':<8} {'HOST':<16} {'NODE':<8} {'GPUS':<5} {'PORT':<6} "
            f"{'BOOTSTRAP':<9} ENGRAM",
        ]
        for w in self.workers:
            boot = "-" if w.bootstrap_port is None else str(w.bootstrap_port)
            lines.append(
                f"{w.name:<16} {w.role:<8} {w.host:<16} {short_node(w.node_id):<8} "
                f"{w.gpus:<5g} {w.port:<6} {boot:<9} {w.engram_offload}"
            )
        lines.append(
            f"{'router':<16} {'router':<8} {r.host:<16} {'-':<8} {'-':<5} {r.port:<6} {'-':<9} -"
        )
        pins = [f"  {g.name}: {g.pins}" for g in s.workers if g.pins]
        lines += ["", "pinned groups:", *pins] if pins else []
        lines += ["", "commands:"]
        lines += [f"  {w.name}: {w.shell}" for w in self.workers]
        lines += [f"  router: {r.shell}", "", f"logs: {self.log_dir}"]
        lines.append(
            f"keys: clients send the key in {key_files(s)[1]} (Authorization: Bearer); "
            "`up` gives each process its keys, never on its command line"
        )
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])


def build_plan(
    spec: ClusterSpec, nodes: list[Node], *, router_host: str, log_dir: str | None = None
) -> ClusterPlan:
    """Assign the workers to ``nodes`` and resolve every command line; the logs go to
    ``log_dir``, else the spec's, else the cluster's run directory."""
    log_dir = log_dir or spec.log_dir or str(run_dir(spec.name) / "logs")
    names = [(name, g) for g in spec.workers for name in g.worker_names]
    cpu = spec.device == "cpu"
    demands = [Demand.of(name, g, 0 if cpu else g.gpus_per_worker) for name, g in names]
    assigned = (spread_nodes if cpu else assign_nodes)(demands, nodes)
    workers: list[WorkerPlan] = []
    for k, (name, group) in enumerate(names):
        bootstrap = None
        if group.role == "prefill":
            bootstrap = spec.bootstrap_base_port + sum(w.role == "prefill" for w in workers)
        port = spec.base_port + k
        workers.append(_worker(spec, name, group, assigned[name], port, bootstrap, log_dir))
    router_argv = tuple(_router_argv(spec, workers))
    router = ProcessPlan(
        router_host, spec.router.port, router_argv, str(Path(log_dir) / "router.log")
    )
    return ClusterPlan(spec=spec, workers=tuple(workers), router=router, log_dir=log_dir)


def _worker(
    spec: ClusterSpec,
    name: str,
    group: WorkerGroup,
    node: Node,
    port: int,
    bootstrap: int | None,
    log_dir: str,
) -> WorkerPlan:
    """Worker ``name``'s plan on ``node``."""
    cpu = spec.device == "cpu"
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", spec.model]
    argv += ["--host", node.ip, "--port", str(port), *(_cpu_args(group) if cpu else [])]
    argv += ["--tp-size", str(group.tp_size), "--disaggregation-mode", group.role]
    argv += ["--disaggregation-transfer-backend", spec.transfer_backend]
    if bootstrap is not None:
        argv += ["--disaggregation-bootstrap-port", str(bootstrap)]
    # --enable-metrics: `status` reads the plugin's Engram gauges from /metrics.
    engram = [flag.replace(WORKER_FIELD, name) for flag in group.engram_flags]
    argv += [*engram, "--enable-metrics", *group.extra_args]
    env = {**({CPU_ENGINE_VAR: "1"} if cpu else {}), HOST_IP_VAR: node.ip}
    return WorkerPlan(
        host=node.ip,
        port=port,
        command=tuple(argv),
        log=str(Path(log_dir) / f"{name}.log"),
        name=name,
        role=group.role,
        env={**env, **spec.timeouts.worker_env},
        node_id=node.node_id,
        gpus=0 if cpu else group.gpus_per_worker,
        bootstrap_port=bootstrap,
        engram_offload=group.engram_offload,
    )


def short_node(node_id: str | None) -> str:
    """A Ray node id as shown: its first 8 hex digits."""
    return node_id[:8] if node_id else "-"


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
