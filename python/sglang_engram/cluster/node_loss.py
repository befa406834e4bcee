"""Workers whose Ray node is gone (a host lost: its raylet, its workers, its supervisors
killed at once), or whose supervising actor died on a live node (Ray's memory monitor
kills actors when a node runs low), and where each can run again.

Either way nothing of the worker is left to supervise. ``up`` then takes it off the
router, shows it ``lost`` (``status`` names a node that is gone), and starts it again as
soon as a live node matches its group's pins (a pinned worker waits for such a node, e.g.
its host's new raylet; an unpinned one goes to the node with the fewest workers). Its
ports stay the same; its address is its new node's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sglang_engram.cluster.assignment import Node
from sglang_engram.cluster.plan import ClusterPlan, WorkerPlan, short_node
from sglang_engram.cluster.spec import ClusterSpecError


def lost_workers(
    workers: Mapping[str, WorkerPlan], live: Iterable[Node], members: Mapping[str, Any]
) -> dict[str, tuple[str, bool]]:
    """Those of ``workers`` that are gone: why, and whether their node went with them
    (it is not among the ``live`` ones), else their actor died (``members``: the last
    statuses, from ``status.poll``)."""
    alive = {n.node_id for n in live}
    out = {}
    for name, w in workers.items():
        if w.node_id is not None and w.node_id not in alive:
            out[name] = (f"its node {w.host} ({short_node(w.node_id)}) is gone", True)
        elif (member := members.get(name) or {}).get("actor_died"):
            out[name] = (f"its supervisor died ({member.get('error')})", False)
    return out


def lost_status(
    last: Mapping[str, Any], w: WorkerPlan, why: str, node_gone: bool, pins: str
) -> dict[str, Any]:
    """The status of ``w`` once lost: its last one, with why."""
    wait = f"a live node with {pins}" if pins else "a live node"
    return {
        **last,
        "state": "lost",
        "pid": None,
        "host": w.host,
        "node_id": w.node_id,
        "node_gone": node_gone,
        "error": f"{why}; waiting for {wait}",
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
