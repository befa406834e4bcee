"""Node assignment: which node each worker runs on.

GPU workers: first fit, largest worker first, over the nodes of the Ray cluster with
GPUs (or this host when planning without one). CPU workers (``device: cpu``) hold no
GPUs: they go round the nodes in turn. ``up`` pins each worker's actor to its node;
which GPUs of that node it gets is Ray's choice (``status`` shows them), so the plan
names none.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from sglang_engram.cluster.spec import ClusterSpecError


@dataclass(frozen=True)
class Node:
    ip: str
    gpus: float
    node_id: str | None = None


NodeAssignment = dict[str, Node]  # worker name -> the node it runs on


def assign_nodes(demands: list[tuple[str, float]], nodes: list[Node]) -> NodeAssignment:
    """Give each ``(worker, gpus)`` a node; raise when something cannot fit."""
    if not nodes:
        raise ClusterSpecError("no node with GPUs to run workers on")
    largest = max(int(n.gpus) for n in nodes)
    for name, gpus in demands:
        if gpus > largest:
            raise ClusterSpecError(
                f"worker {name} needs {gpus:g} GPUs on one node, but the largest node has {largest}"
            )
    total, needed = sum(int(n.gpus) for n in nodes), sum(g for _, g in demands)
    if needed > total + 1e-9:
        raise ClusterSpecError(
            f"the spec needs {needed:g} GPUs in all, but the cluster has {total} "
            f"({', '.join(f'{n.ip}: {int(n.gpus)}' for n in nodes)})"
        )
    # NOTE: free capacity per GPU, only to know what fits: Ray shares a GPU among
    # fractional workers the same way (a fraction never spans two GPUs).
    free = {n.ip: [1.0] * int(n.gpus) for n in nodes}
    out: NodeAssignment = {}
    # Largest first; ties keep spec order, so the assignment is stable from run to run.
    for name, gpus in sorted(demands, key=lambda d: -d[1]):
        node = next((n for n in nodes if _take(free[n.ip], gpus)), None)
        if node is None:
            per_node = ", ".join(f"{ip}: {sum(c >= 1 for c in f)}" for ip, f in free.items())
            raise ClusterSpecError(
                f"worker {name} ({gpus:g} GPUs) does not fit: free GPUs per node are {per_node}"
            )
        out[name] = node
    return {name: out[name] for name, _ in demands}


def spread_nodes(names: list[str], nodes: list[Node]) -> NodeAssignment:
    """CPU workers: the k-th worker on node k modulo the number of nodes."""
    if not nodes:
        raise ClusterSpecError("no live node to run workers on")
    return {name: nodes[k % len(nodes)] for k, name in enumerate(names)}


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
    """The live nodes of the connected Ray cluster (for ``gpu``, those with GPUs), as Ray
    accounts them."""
    import ray

    live = [n for n in ray.nodes() if n.get("Alive")]
    nodes = [Node(n["NodeManagerAddress"], n["Resources"].get("GPU", 0), n["NodeID"]) for n in live]
    return nodes if device == "cpu" else [n for n in nodes if n.gpus > 0]


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
