"""``status`` and ``down``: find a cluster's actors in Ray and ask them, or stop them.

Only what ``up`` started is touched: the named actors of the cluster's own namespace
and its placement groups; the Ray cluster itself is left alone (a local one ends with
the ``up`` that started it).
"""

from __future__ import annotations

from typing import Any

from sglang_engram.cluster.metrics import summarize
from sglang_engram.cluster.state import ROUTER_ACTOR, ClusterState

_ASK_TIMEOUT_S = 15.0


def actor_handles(namespace: str, names: list[str]) -> dict[str, Any]:
    """The live actors among ``names`` plus any other named actor of the namespace."""
    import ray

    found = {}
    extra = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == namespace and a["name"] not in names
    ]
    for name in [*names, *extra]:
        try:
            found[name] = ray.get_actor(name, namespace=namespace)
        except ValueError:
            pass
    return found


def collect_status(state: ClusterState) -> dict[str, Any]:
    """Every worker's and the router's status, and the cluster's overall health."""
    import ray

    handles = actor_handles(state.namespace, state.actor_names)
    refs = {name: h.status.remote() for name, h in handles.items()}
    statuses: dict[str, dict[str, Any]] = {}
    for name in state.actor_names:
        if name not in refs:
            # Not created yet while `up` is still starting; lost once the cluster runs.
            statuses[name] = {"state": "gone" if state.phase == "running" else "pending"}
            continue
        try:
            statuses[name] = ray.get(refs[name], timeout=_ASK_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            statuses[name] = {"state": "unreachable", "error": str(exc).splitlines()[0]}
    planned = {w["name"]: w for w in state.plan.get("workers", [])}
    workers = [
        {
            "name": n,
            "engram_offload": planned.get(n, {}).get("engram_offload"),
            "port": planned.get(n, {}).get("port"),
            "bootstrap_port": planned.get(n, {}).get("bootstrap_port"),
            **statuses[n],
        }
        for n in state.workers
    ]
    router = {"name": ROUTER_ACTOR, "url": state.router_url, **statuses[ROUTER_ACTOR]}
    return {
        "name": state.name,
        "namespace": state.namespace,
        "ray_address": state.ray_address,
        "phase": state.phase,
        # NOTE: the actors supervise in both modes; a foreground `up` also stops it all.
        "mode": "detached" if state.detached else f"foreground up (pid {state.up_pid})",
        "local_ray": state.local_ray,
        "health": overall_health(state.phase, [*workers, router]),
        "router": router,
        "workers": workers,
        "log_dir": state.log_dir,
    }


def overall_health(phase: str, members: list[dict[str, Any]]) -> str:
    """healthy | degraded (something gave up or vanished) | recovering | starting."""
    states = [m["state"] for m in members]
    if any(s in ("failed", "gone", "unreachable") for s in states):
        return "degraded"
    if phase != "running":
        return phase
    # registered is None for the router itself and before a worker's first check.
    registered = all((m.get("router") or {}).get("registered") is not False for m in members)
    if all(s == "running" for s in states) and registered:
        return "healthy"
    return "recovering"


def render_status(status: dict[str, Any]) -> str:
    r = status["router"]
    lines = [
        f"cluster {status['name']}: {status['health']} (phase {status['phase']}, Ray "
        f"{status['ray_address']}{' started by up' if status['local_ray'] else ''}, "
        f"namespace {status['namespace']}; {status['mode']})",
        f"router {r.get('url') or '-'}: {r['state']}, restarts {_restarts(r)}, pid {r.get('pid') or '-'}",
        "",
        f"{'WORKER':<16} {'ROLE':<8} {'STATE':<11} {'RESTARTS':<8} {'HOST':<16} {'GPUS':<6} "
        f"{'PID':<8} {'ROUTER':<12} ENGRAM",
    ]
    for w in status["workers"]:
        reg = w.get("router") or {}
        registered = {True: "registered", False: "absent", None: "-"}[reg.get("registered")]
        engram = f"{w.get('engram_offload') or '?'}: {summarize(w.get('engram', []))}"
        lines.append(
            f"{w['name']:<16} {w.get('role', '?'):<8} {w['state']:<11} {_restarts(w):<8} "
            f"{w.get('host', '-'):<16} {','.join(w.get('gpu_ids', [])) or '-':<6} "
            f"{w.get('pid') or '-'!s:<8} {registered:<12} {engram}"
        )
    lines += ["", f"logs: {status['log_dir']}"]
    return "\n".join(lines)


def _restarts(member: dict[str, Any]) -> str:
    if "restarts" not in member:
        return "-"
    return f"{member['restarts']}/{member['max_restarts']}"


def teardown(state: ClusterState, say: Any = print) -> list[int]:
    """Stop the router, then every worker, kill their actors, drop the placement groups.

    Returns the pids of the processes that were stopped.
    """
    import ray
    from ray.util import get_placement_group, remove_placement_group

    handles = actor_handles(state.namespace, state.actor_names)
    # NOTE: the router goes first, so that no request is sent to a stopping worker.
    order = sorted(handles, key=lambda n: n != ROUTER_ACTOR)
    pids: list[int] = []
    for batch in ([n for n in order if n == ROUTER_ACTOR], [n for n in order if n != ROUTER_ACTOR]):
        refs = {name: handles[name].stop.remote() for name in batch}
        for name, ref in refs.items():
            try:
                stopped = ray.get(ref, timeout=120)
                pids += stopped
                say(f"stopped {name} (pids {', '.join(map(str, stopped)) or 'none running'})")
            except (ray.exceptions.RayError, TimeoutError) as exc:
                say(
                    f"could not stop {name} cleanly ({str(exc).splitlines()[0]}); killing its actor"
                )
    for name in order:
        ray.kill(handles[name], no_restart=True)
    for worker in state.workers:
        try:
            remove_placement_group(get_placement_group(state.placement_group_name(worker)))
        except ValueError:
            pass  # never created, or already removed
    return pids
