"""Which node and which GPUs each worker gets.

The plan places workers first-fit, largest first, on the nodes of the Ray cluster (or
on this host when planning without one). ``up`` then pins each worker's placement group
to its planned node, so the host the plan prints is the host the worker runs on; the
exact GPU ids on that node are Ray's choice and ``status`` reports them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass

from sglang_engram.cluster.spec import ClusterSpecError


@dataclass(frozen=True)
class Node:
    ip: str
    gpus: float
    node_id: str | None = None

    @property
    def resource(self) -> str:
        """Ray's per-node custom resource; a bundle asking for a sliver of it lands here."""
        return f"node:{self.ip}"


@dataclass(frozen=True)
class Slot:
    node: Node
    gpu_ids: tuple[int, ...]


def place(demands: list[tuple[str, float]], nodes: list[Node]) -> dict[str, Slot]:
    """Give each ``(worker, gpus)`` a node and GPU ids; raise when something cannot fit."""
    if not nodes:
        raise ClusterSpecError("no node to place workers on")
    free = {n.ip: [1.0] * int(n.gpus) for n in nodes}
    total = sum(int(n.gpus) for n in nodes)
    needed = sum(g for _, g in demands)
    largest = max(int(n.gpus) for n in nodes)
    for name, gpus in demands:
        if gpus > largest:
            raise ClusterSpecError(
                f"worker {name} needs {gpus:g} GPUs on one node, but the largest node has {largest}"
            )
    if needed > total + 1e-9:
        raise ClusterSpecError(
            f"the spec needs {needed:g} GPUs in all, but the cluster has {total} "
            f"({', '.join(f'{n.ip}: {int(n.gpus)}' for n in nodes)})"
        )
    slots: dict[str, Slot] = {}
    # NOTE: largest first; ties keep spec order, so the plan is stable from run to run.
    for name, gpus in sorted(demands, key=lambda d: -d[1]):
        slot = _fit(gpus, nodes, free)
        if slot is None:
            raise ClusterSpecError(
                f"worker {name} ({gpus:g} GPUs) does not fit: free GPUs per node are "
                + ", ".join(
                    f"{ip}: {sum(1 for c in caps if c >= 1.0)}" for ip, caps in free.items()
                )
            )
        slots[name] = slot
    return {name: slots[name] for name, _ in demands}


def _fit(gpus: float, nodes: list[Node], free: dict[str, list[float]]) -> Slot | None:
    for node in nodes:
        caps = free[node.ip]
        if gpus < 1:
            # Share a GPU: the fullest one that still has room (best fit).
            room = [(c, i) for i, c in enumerate(caps) if c + 1e-9 >= gpus]
            if room:
                _, i = min(room)
                caps[i] -= gpus
                return Slot(node, (i,))
            continue
        whole = [i for i, c in enumerate(caps) if c >= 1.0][: int(gpus)]
        if len(whole) == int(gpus):
            for i in whole:
                caps[i] = 0.0
            return Slot(node, tuple(whole))
    return None


def local_node(num_gpus: float | None) -> Node:
    """This host as one node: the GPUs Ray would detect, or ``num_gpus``."""
    gpus = detect_local_gpus() if num_gpus is None else num_gpus
    if gpus <= 0:
        raise ClusterSpecError(
            "this host has no GPU that Ray would see; pass --num-gpus N to plan for N GPUs, "
            "or --address to plan against a Ray cluster"
        )
    return Node(ip=local_ip(), gpus=gpus)


def detect_local_gpus() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def local_ip() -> str:
    """The address other nodes reach this host at (the outbound interface's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent for a UDP connect
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"
