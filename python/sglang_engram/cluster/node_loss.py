"""Workers whose Ray node is gone (a host lost: its raylet, its workers, its supervisors
killed at once), and where each can run again.

A worker is lost once Ray has declared its node dead: nothing of it is left to supervise
(its actor died with the node). ``up`` then takes it off the router, shows it ``lost``
(``status`` names the node), and starts it again as soon as a live node matches its
group's pins (a pinned worker waits for such a node, e.g. its host's new raylet; an
unpinned one goes to the node with the fewest workers). Its ports stay the same; its
address is its new node's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sglang_engram.cluster.assignment import Node
from sglang_engram.cluster.plan import ClusterPlan, WorkerPlan, short_node
from sglang_engram.cluster.spec import ClusterSpecError


def lost_workers(workers: Mapping[str, WorkerPlan], live: Iterable[Node]) -> list[str]:
    """Those of ``workers`` whose node is not among the ``live`` ones."""
    alive = {n.node_id for n in live}
    return [name for name, w in workers.items() if w.node_id is not None and w.node_id not in alive]


def lost_status(last: Mapping[str, Any], w: WorkerPlan, pins: str) -> dict[str, Any]:
    """The status of ``w`` once lost: its last one, with the node that went."""
    wait = f"a live node with {pins}" if pins else "a live node"
    return {
        **last,
        "state": "lost",
        "pid": None,
        "host": w.host,
        "node_id": w.node_id,
        "error": f"its node {w.host} ({short_node(w.node_id)}) is gone; waiting for {wait}",
    }


def places(
    plan: ClusterPlan, lost: Iterable[str], running: Mapping[str, WorkerPlan], live: list[Node]
) -> dict[str, WorkerPlan]:
    """A new plan for each ``lost`` worker that one of the ``live`` nodes can run now,
    the ``running`` workers taking their share first."""
    nodes = {n.node_id: n for n in live}
    placed = [(plan.demand(n), nodes[w.node_id]) for n, w in running.items() if w.node_id in nodes]
    out: dict[str, WorkerPlan] = {}
    for name in lost:
        try:
            out[name] = plan.place(name, live, placed)
        except ClusterSpecError:
            continue  # NOTE: no node for it yet; asked again at the next poll
        placed.append((plan.demand(name), nodes[out[name].node_id]))
    return out
