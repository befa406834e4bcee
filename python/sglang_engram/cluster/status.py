"""``status``: the members' states as ``up`` last polled them, the cluster's health, and
their rendering. Only ``poll`` talks to Ray, from inside ``up``."""

from __future__ import annotations

import time
from typing import Any

from sglang_engram.cluster.engram_gauges import summarize
from sglang_engram.cluster.state import ROUTER_ACTOR, ClusterState

_ASK_TIMEOUT_S = 15.0


def poll(actors: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each actor's status (a dead or hung one as ``unreachable``)."""
    import ray

    refs = {name: a.status.remote() for name, a in actors.items()}
    out = {}
    for name, ref in refs.items():
        try:
            out[name] = ray.get(ref, timeout=_ASK_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            out[name] = {"state": "unreachable", "error": str(exc).splitlines()[0]}
    return out


def collect_status(state: ClusterState) -> dict[str, Any]:
    """Every worker's and the router's status, and the cluster's overall health."""
    planned = {w["name"]: w for w in state.plan.get("workers", [])}
    keys = ("engram_offload", "port", "bootstrap_port")

    def member(name: str) -> dict[str, Any]:
        # Not started yet while `up` is still starting.
        return state.members.get(name, {"state": "pending"})

    workers = [{"name": n, **{k: planned.get(n, {}).get(k) for k in keys}, **member(n)}
               for n in state.workers]  # fmt: skip
    router = {"name": ROUTER_ACTOR, "url": state.router_url, **member(ROUTER_ACTOR)}
    age = None if state.polled_at is None else round(time.time() - state.polled_at, 1)
    return {
        "name": state.name,
        "ray_address": state.ray_address,
        "local_ray": state.local_ray,
        "up_pid": state.up_pid,
        "phase": state.phase,
        "health": overall_health(state.phase, [*workers, router]),
        "age_s": age,
        "router": router,
        "workers": workers,
        "log_dir": state.log_dir,
    }


def overall_health(phase: str, members: list[dict[str, Any]]) -> str:
    """healthy | degraded (something gave up or vanished) | recovering | starting | stopping."""
    states = [m["state"] for m in members]
    if any(s in ("failed", "unreachable") for s in states):
        return "degraded"
    if phase != "running":
        return phase
    # registered is None for the router itself and before a worker's first check.
    registered = all((m.get("router") or {}).get("registered") is not False for m in members)
    return "healthy" if registered and all(s == "running" for s in states) else "recovering"


def render_status(status: dict[str, Any]) -> str:
    r = status["router"]
    age = "never" if status["age_s"] is None else f"{status['age_s']:g} s ago"
    lines = [
        f"cluster {status['name']}: {status['health']} (phase {status['phase']}, up pid "
        f"{status['up_pid']}, Ray {status['ray_address']}"
        f"{' started by up' if status['local_ray'] else ''}; polled {age})",
        f"router {r.get('url') or '-'}: {r['state']}, restarts {_restarts(r)}, "
        f"pid {r.get('pid') or '-'}",
        "",
        f"{'WORKER':<16} {'ROLE':<8} {'STATE':<11} {'RESTARTS':<8} {'HOST':<16} {'GPUS':<6} "
        f"{'PID':<8} {'ROUTER':<12} ENGRAM",
    ]
    for w in status["workers"]:
        registered = {True: "registered", False: "absent", None: "-"}[
            (w.get("router") or {}).get("registered")
        ]
        engram = f"{w.get('engram_offload') or '?'}: {summarize(w.get('engram', []))}"
        lines.append(
            f"{w['name']:<16} {w.get('role', '?'):<8} {w['state']:<11} {_restarts(w):<8} "
            f"{w.get('host', '-'):<16} {','.join(w.get('gpu_ids', [])) or '-':<6} "
            f"{w.get('pid') or '-'!s:<8} {registered:<12} {engram}"
        )
    lines += [f"{m['name']} {m['state']}: {m['error']}" for m in [r, *status["workers"]]
              if m["state"] in ("failed", "unreachable") and m.get("error")]  # fmt: skip
    lines += ["", f"logs: {status['log_dir']}"]
    return "\n".join(lines)


def _restarts(member: dict[str, Any]) -> str:
    if "restarts" not in member:
        return "-"
    return f"{member['restarts']}/{member['max_restarts']}"
