"""Node assignment: which node each worker runs on.

GPU workers: first fit, largest worker first, over the nodes of the Ray cluster with
GPUs (or this host when planning without one). CPU workers (``device: cpu``) hold no
GPUs: each goes to the node with the fewest workers so far (round the nodes in turn). A
worker pinned by its group (``node_labels``, ``node_resources``) goes only to a node with
those labels and enough of those resources left. ``up`` pins each worker's actor to its
node; which GPUs of that node it gets is Ray's choice (``status`` shows them), so the plan
names none. Nodes are told apart by Ray's node id: two raylets on one address (two on
a laptop) are two nodes.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sglang_engram.cluster.spec import RAY_RESOURCES, ClusterSpecError, WorkerGroup


@dataclass(frozen=True)
class Node:
    ip: str
    gpus: float
    node_id: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    resources: Mapping[str, float] = field(default_factory=dict, hash=False)  # custom ones

    @property
    def key(self) -> str:
        return self.node_id or self.ip

    def describe(self) -> str:
        """The node in a message: its address, id and labels."""
        labels = ",".join(f"{k}={v}" for k, v in self.labels.items() if not k.startswith("ray.io/"))
        node = f" node {self.node_id[:8]}" if self.node_id else ""
        return f"{self.ip}{node}" + (f" ({labels})" if labels else "")


@dataclass(frozen=True)
class Demand:
    """One worker: its GPUs and its group's pins."""

    name: str
    gpus: float = 0
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    resources: Mapping[str, float] = field(default_factory=dict, hash=False)
    pins: str = ""  # the pins in words

    @classmethod
    def of(cls, name: str, group: WorkerGroup, gpus: float) -> Demand:
        return cls(name, gpus, group.node_labels, group.node_resources, group.pins)

    def matches(self, node: Node, left: Mapping[str, float] | None = None) -> bool:
        """Whether ``node`` has the pins' labels, and the resources (of ``left``, else all)."""
        left = node.resources if left is None else left
        return all(node.labels.get(k) == v for k, v in self.labels.items()) and all(
            left.get(r, 0) + 1e-9 >= a for r, a in self.resources.items()
        )


NodeAssignment = dict[str, Node]  # worker name -> the node it runs on
Placed = Iterable[tuple[Demand, Node]]  # workers already running, and where


def assign_nodes(
    demands: list[Demand], nodes: list[Node], *, placed: Placed = ()
) -> NodeAssignment:
    """Give each GPU worker a node (``placed`` take their share first); raise when
    something cannot fit."""
    if not nodes:
        raise ClusterSpecError("no node with GPUs to run workers on")
    largest = max(int(n.gpus) for n in nodes)
    for d in demands:
        if d.gpus > largest:
            raise ClusterSpecError(
                f"worker {d.name} needs {d.gpus:g} GPUs on one node, but the largest node has {largest}"
            )
    total, needed = sum(int(n.gpus) for n in nodes), sum(d.gpus for d in demands)
    if needed > total + 1e-9:
        raise ClusterSpecError(
            f"the spec needs {needed:g} GPUs in all, but the cluster has {total} "
            f"({', '.join(f'{n.ip}: {int(n.gpus)}' for n in nodes)})"
        )
    # NOTE: free capacity per GPU, only to know what fits: Ray shares a GPU among
    # fractional workers the same way (a fraction never spans two GPUs).
    free = _Free(nodes)
    for d, node in placed:
        free.take(d, node)
    out: NodeAssignment = {}
    # Largest first; ties keep spec order, so the assignment is stable from run to run.
    for d in sorted(demands, key=lambda d: -d.gpus):
        if d.pins and not free.matching(d):
            raise free.unmatched(d)
        node = next((n for n in free.matching(d) if free.take(d, n)), None)
        if node is None:
            per_node = ", ".join(f"{n.ip}: {sum(c >= 1 for c in free.gpus[n.key])}" for n in nodes)
            raise ClusterSpecError(
                f"worker {d.name} ({d.gpus:g} GPUs) does not fit: free GPUs per node are {per_node}"
            )
        out[d.name] = node
    return {d.name: out[d.name] for d in demands}


def spread_nodes(
    demands: list[Demand], nodes: list[Node], *, placed: Placed = ()
) -> NodeAssignment:
    """CPU workers, in order: each on the node (of those it may use) with the fewest
    workers so far; unpinned, the k-th worker lands on node k modulo the number of nodes."""
    if not nodes:
        raise ClusterSpecError("no live node to run workers on")
    free = _Free(nodes)
    for d, node in placed:
        free.take(d, node)
    out: NodeAssignment = {}
    for d in demands:
        node = min(free.matching(d), key=lambda n: free.workers[n.key], default=None)
        if node is None:
            raise free.unmatched(d)
        free.take(d, node)
        out[d.name] = node
    return out


class _Free:
    """What is left of each node: its GPUs (per GPU), its custom resources, its workers."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.gpus = {n.key: [1.0] * int(n.gpus) for n in nodes}
        self.resources = {n.key: dict(n.resources) for n in nodes}
        self.workers = dict.fromkeys((n.key for n in nodes), 0)

    def matching(self, d: Demand) -> list[Node]:
        """The nodes with ``d``'s labels and enough of its resources left."""
        return [n for n in self.nodes if d.matches(n, self.resources[n.key])]

    def take(self, d: Demand, node: Node) -> bool:
        """Take ``d``'s GPUs and resources from ``node`` if they fit; whether they did."""
        if d.gpus and not _take(self.gpus[node.key], d.gpus):
            return False
        for r, a in d.resources.items():
            self.resources[node.key][r] = self.resources[node.key].get(r, 0) - a
        self.workers[node.key] += 1
        return True

    def unmatched(self, d: Demand) -> ClusterSpecError:
        nodes = "; ".join(n.describe() for n in self.nodes) or "none"
        if any(d.matches(n) for n in self.nodes):
            why = f"every node with its pins ({d.pins}) is full"
        else:
            why = f"it is pinned to {d.pins}, which no live node has"
        return ClusterSpecError(f"worker {d.name} has no node: {why} (nodes: {nodes})")


def _take(free: list[float], gpus: float) -> bool:
    """Take ``gpus`` from one node's per-GPU free capacity, if it fits."""
    if gpus < 1:  # share a GPU: the fullest one that still has room (best fit)
        room = [(c, i) for i, c in enumerate(free) if c + 1e-9 >= gpus]
        if room:
            free[min(room)[1]] -= gpus
        return bool(room)
    whole = [i for i, c in enumerate(free) if c >= 1.0][: int(gpus)]
    if len(whole) < gpus:
        return False
    for i in whole:
        free[i] = 0.0
    return True


def ray_nodes(device: str = "gpu") -> list[Node]:
    """The live nodes of the connected Ray cluster that can run ``device`` workers (for
    ``gpu``, those with GPUs), as Ray accounts them."""
    nodes = live_nodes()
    return nodes if device == "cpu" else [n for n in nodes if n.gpus > 0]


def live_nodes() -> list[Node]:
    """Every node of the connected Ray cluster that Ray has not declared dead."""
    import ray

    return [_node(n) for n in ray.nodes() if n.get("Alive")]


def _node(info: dict) -> Node:
    """A node as ``ray.nodes()`` gives it; of its resources, only the custom ones count
    as pins (Ray adds ``node:<ip>`` and accelerator kinds of its own)."""
    resources = info.get("Resources", {})
    custom = {
        r: a
        for r, a in resources.items()
        if r not in RAY_RESOURCES and not r.startswith(("node:", "accelerator_type:"))
    }
    labels = dict(info.get("Labels") or {})
    return Node(info["NodeManagerAddress"], resources.get("GPU", 0), info["NodeID"], labels, custom)


def local_node(num_gpus: float | None, device: str = "gpu") -> Node:
    """This host as one node: the GPUs Ray would detect, or ``num_gpus``; none for ``cpu``."""
    import ray

    check_num_gpus(device, num_gpus)
    if device == "cpu":
        return Node(ip=ray.util.get_node_ip_address(), gpus=0)
    gpus = _local_gpus() if num_gpus is None else num_gpus
    if gpus <= 0:
        raise ClusterSpecError(
            "this host has no GPU that Ray would see; pass --num-gpus N to plan for N GPUs, "
            "--address to plan against a Ray cluster, or set device: cpu in the spec"
        )
    return Node(ip=ray.util.get_node_ip_address(), gpus=gpus)


def check_num_gpus(device: str, num_gpus: float | None) -> None:
    if device == "cpu" and num_gpus is not None:
        raise ClusterSpecError("--num-gpus is for device gpu; a device cpu spec uses no GPUs")


def _local_gpus() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no nvidia-smi: no NVIDIA GPU
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
