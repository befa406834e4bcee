"""``status``: the members' states as ``up`` last polled them, the cluster's health, and
their rendering. Only ``poll`` talks to Ray, from inside ``up``."""

from __future__ import annotations

import time
from typing import Any

from sglang_engram.cluster.engram_gauges import summarize
from sglang_engram.cluster.plan import short_node
from sglang_engram.cluster.state import ClusterState

DOWN = ("failed", "unreachable", "lost")  # lost: its node is gone (node_loss)


def poll(actors: dict[str, Any], timeout_s: float = 15.0) -> dict[str, dict[str, Any]]:
    """Each actor's status (a dead or hung one as ``unreachable``; ``actor_died`` once
    Ray says it is dead), all asked at once."""
    import ray

    refs = {name: a.status.remote() for name, a in actors.items()}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    out = {}
    for name, ref in refs.items():
        try:
            if ref not in ready:
                raise TimeoutError(f"no answer in {timeout_s:g} s")
            out[name] = ray.get(ref)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            died = isinstance(exc, ray.exceptions.ActorDiedError)
            out[name] = {"state": "unreachable", "error": _first_line(exc), "actor_died": died}
    return out


def collect_status(state: ClusterState) -> dict[str, Any]:
    """Every worker's and the router's status, and the cluster's overall health."""
    plan, pending = state.plan, {"state": "pending"}  # not started yet
    # NOTE: where the plan puts it until its actor says (and, lost, where it was).
    keys = ("name", "role", "engram_offload", "port", "bootstrap_port", "host", "node_id")
    workers = [
        {**{k: w[k] for k in keys}, **state.members.get(w["name"], pending)}
        for w in plan["workers"]
    ]
    router = {
        "name": "router",
        "url": plan["router"]["url"],
        **state.members.get("router", pending),
    }
    return {
        "name": state.name,
        "ray_address": state.ray_address,
        "local_ray": state.local_ray,
        "up_pid": state.up_pid,
        "phase": state.phase,
        "health": overall_health(state.phase, [*workers, router]),
        "age_s": None if state.polled_at is None else round(time.time() - state.polled_at, 1),
        "router": router,
        "workers": workers,
        "lost_nodes": lost_nodes(workers),
        "log_dir": plan["log_dir"],
        "client_key_file": plan.get("client_key_file"),
    }


def overall_health(phase: str, members: list[dict[str, Any]]) -> str:
    """healthy | degraded (something gave up or vanished) | recovering | starting | stopping."""
    states = [m["state"] for m in members]
    if any(s in DOWN for s in states):
        return "degraded"
    if phase != "running":
        return phase
    # registered is None for the router itself and before a worker's first check.
    registered = all(_registered(m) is not False for m in members)
    return "healthy" if registered and all(s == "running" for s in states) else "recovering"


def render_status(status: dict[str, Any]) -> str:
    r, age = status["router"], status["age_s"]
    lines = [
        f"cluster {status['name']}: {status['health']} (phase {status['phase']}, up pid "
        f"{status['up_pid']}, Ray {status['ray_address']}"
        f"{' started by up' if status['local_ray'] else ''}; polled "
        f"{'never' if age is None else f'{age:g} s ago'})",
        f"router {r['url']}: {r['state']}, restarts {_restarts(r)}, pid {r.get('pid') or '-'}",
        "",
        f"{'WORKER':<16} {'ROLE':<8} {'STATE':<11} {'RESTARTS':<8} {'HOST':<16} {'NODE':<8} "
        f"{'GPUS':<6} {'PID':<8} {'ROUTER':<12} ENGRAM",
    ]
    for w in status["workers"]:
        registered = {True: "registered", False: "absent", None: "-"}[_registered(w)]
        lines.append(
            f"{w['name']:<16} {w.get('role', '?'):<8} {w['state']:<11} {_restarts(w):<8} "
            f"{w['host']:<16} {short_node(w['node_id']):<8} "
            f"{','.join(w.get('gpu_ids', [])) or '-':<6} "
            f"{w.get('pid') or '-'!s:<8} {registered:<12} "
            f"{w['engram_offload']}: {summarize(w.get('engram', []))}"
        )
    lines += [
        f"{m['name']} {m['state']}: {m['error']}"
        for m in [r, *status["workers"]]
        if m["state"] in DOWN and m.get("error")
    ]
    lines += [
        f"lost node {n['host']} ({short_node(n['node_id'])}): {', '.join(n['workers'])}"
        for n in status["lost_nodes"]
    ]
    return "\n".join([*lines, "", f"logs: {status['log_dir']}"])


def lost_nodes(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each node that is gone with the workers it took: ``[{host, node_id, workers}]``."""
    nodes: dict[str | None, dict[str, Any]] = {}
    for w in workers:
        if w["state"] == "lost" and w.get("node_gone"):
            node = nodes.setdefault(w["node_id"], {"host": w["host"], "node_id": w["node_id"]})
            node.setdefault("workers", []).append(w["name"])
    return list(nodes.values())


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _registered(member: dict[str, Any]) -> bool | None:
    return (member.get("router") or {}).get("registered")


def _restarts(member: dict[str, Any]) -> str:
    """Restarts in all, and the row that counts against max_restarts when there is one."""
    if "restarts" not in member:
        return "-"
    row = member.get("restarts_in_a_row", 0)
    return f"{member['restarts']}" + (f" ({row}/{member['max_restarts']})" if row else "")
