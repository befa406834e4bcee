"""``up``: reserve GPUs, start the workers, wait for health, start the router, supervise.

Order: one placement group per worker (its GPUs on its planned node), one detached named
actor per worker running the SGLang server, every /health answered, then the router in
PD mode with all prefill and decode URLs (on the node running ``up``), then each
worker's registration loop is attached to the router. Without ``--detach``, ``up``
stays in the foreground reporting changes until Ctrl-C (or SIGTERM), then stops all of
it. Anything that fails half-way is torn down before ``up`` exits.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_engram.cluster import ray_session
from sglang_engram.cluster.control import collect_status, teardown
from sglang_engram.cluster.plan import ClusterPlan, WorkerPlan, build_plan, router_argv
from sglang_engram.cluster.spec import ClusterSpec
from sglang_engram.cluster.state import ROUTER_ACTOR, ClusterNotFound, ClusterState, run_dir
from sglang_engram.cluster.supervisor import ProcessSpec, probe

Say = Callable[[str], None]
_PROGRESS_EVERY_S = 10.0


class LaunchError(RuntimeError):
    """The cluster could not be brought up; what was started has been stopped."""


@dataclasses.dataclass(frozen=True)
class UpOptions:
    address: str | None = None
    num_gpus: float | None = None
    detach: bool = False
    timeout_s: float = 1800.0
    placement_timeout_s: float = 120.0
    log_dir: str | None = None


def up(spec: ClusterSpec, options: UpOptions, say: Say = print) -> int:
    if options.detach and not options.address:
        raise LaunchError(
            "--detach needs a Ray cluster that outlives this command: start one with "
            "`ray start --head --num-gpus N` and pass --address HOST:PORT (or set RAY_ADDRESS)"
        )
    _refuse_if_running(spec.name)
    import ray

    say(
        "connecting to Ray at " + options.address
        if options.address
        else "starting a local Ray cluster"
    )
    address, local = ray_session.connect(options.address, spec.namespace, num_gpus=options.num_gpus)
    state: ClusterState | None = None
    try:
        log_dir = options.log_dir or spec.log_dir or str(run_dir(spec.name) / "logs")
        driver_ip = ray.util.get_node_ip_address()
        plan = build_plan(spec, ray_session.cluster_nodes(), router_host=driver_ip, log_dir=log_dir)
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        state = ClusterState(
            name=spec.name,
            namespace=spec.namespace,
            ray_address=address,
            local_ray=local,
            up_pid=os.getpid(),
            detached=options.detach,
            log_dir=log_dir,
            workers=tuple(w.name for w in plan.workers),
            ray_auth_mode=ray_session.auth_mode(),
            plan=plan.to_dict(),
        )
        state.save()
        state = _launch(plan, state, options, say)
        if options.detach:
            say(
                f"detached; see `python -m sglang_engram.cluster status --name {spec.name}`, "
                f"stop with `... down --name {spec.name}`"
            )
            return 0
        say("supervising; press Ctrl-C to stop the cluster")
        _watch(state, say)
    except BaseException as exc:
        if state is not None and _still_ours(state):
            say(("interrupted; " if isinstance(exc, KeyboardInterrupt) else "") + "stopping ...")
            _stop(state, say)
        if not isinstance(exc, KeyboardInterrupt):
            raise
        # Ctrl-C once the cluster ran is the normal way to stop it; before, it is not.
        return 0 if state is not None and state.phase == "running" else 130
    finally:
        ray_session.disconnect()
    return 0


def _still_ours(state: ClusterState) -> bool:
    """False once `down` in another process has taken the cluster over."""
    try:
        return ClusterState.load(state.name).phase != "stopping"
    except ClusterNotFound:
        return False


def _stop(state: ClusterState, say: Say) -> None:
    # NOTE: a second Ctrl-C must not cut the teardown short and leave processes behind.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    state.with_phase("stopping")
    teardown(state, say)
    state.remove()


def _refuse_if_running(name: str) -> None:
    try:
        old = ClusterState.load(name)
    except ClusterNotFound:
        return
    try:
        ray_session.check_reachable(old.ray_address)
    except ray_session.RayUnreachable:
        old.remove()  # stale: its Ray cluster is gone, so is everything it started
        return
    raise LaunchError(
        f"cluster {name!r} is already up (or was not taken down) on Ray {old.ray_address}; "
        f"run `python -m sglang_engram.cluster down --name {name}` first"
    )


def _launch(plan: ClusterPlan, state: ClusterState, options: UpOptions, say: Say) -> ClusterState:
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        PlacementGroupSchedulingStrategy,
    )

    from sglang_engram.cluster.actor import RemoteServerActor

    spec = plan.spec
    groups = {}
    for w in plan.workers:
        # NOTE: the sliver of the node's own resource pins the bundle to the planned node.
        bundle = {"GPU": w.gpus, w.node_resource: 0.001}
        groups[w.name] = placement_group(
            [bundle],
            strategy="STRICT_PACK",
            name=state.placement_group_name(w.name),
            lifetime="detached",
        )
    say(f"reserving GPUs for {len(plan.workers)} workers ...")
    ready, _ = ray.wait(
        [g.ready() for g in groups.values()],
        num_returns=len(groups),
        timeout=options.placement_timeout_s,
    )
    if len(ready) < len(groups):
        late = [n for n, g in groups.items() if g.ready() not in ready]
        raise LaunchError(
            f"Ray could not reserve GPUs for {', '.join(late)} within "
            f"{options.placement_timeout_s:g}s; are other jobs holding the GPUs? (`ray status`)"
        )
    actors: dict[str, Any] = {}
    for w in plan.workers:
        actors[w.name] = RemoteServerActor.options(
            name=w.name,
            namespace=spec.namespace,
            lifetime="detached",
            num_cpus=0,
            num_gpus=w.gpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(groups[w.name], 0),
        ).remote(
            _process_spec(w.name, w.argv, w.log_path, w.port, "/health", spec),
            role=w.role,
            port=w.port,
            bootstrap_port=w.bootstrap_port,
        )
    started = dict(zip(actors, ray.get([a.start.remote() for a in actors.values()]), strict=True))
    for name, info in started.items():
        say(f"started {name} on {info['host']} (GPU {','.join(info['gpu_ids'])})")
    _wait(
        actors,
        lambda s: s["state"] == "running",
        "workers to answer /health",
        options.timeout_s,
        say,
    )

    # The router: on this node, with the URLs the workers actually got.
    workers = [dataclasses.replace(w, host=started[w.name]["host"]) for w in plan.workers]
    r = plan.router
    router = RemoteServerActor.options(
        name=ROUTER_ACTOR,
        namespace=spec.namespace,
        lifetime="detached",
        num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        ),
    ).remote(
        _process_spec("router", router_argv(spec, workers), r.log_path, r.port, "/liveness", spec),
        role="router",
        port=r.port,
    )
    ray.get(router.start.remote())
    _wait(
        {ROUTER_ACTOR: router},
        lambda s: s["state"] == "running" and _router_ready(r.url, workers),
        "the router to register every worker",
        options.timeout_s,
        say,
    )
    ray.get([a.attach_router.remote(r.url) for a in actors.values()])
    state = state.with_phase("running", router_url=r.url)
    n_prefill = sum(w.role == "prefill" for w in workers)
    say(
        f"ready: {r.url} (router; {n_prefill} prefill, {len(workers) - n_prefill} decode "
        f"workers; logs in {plan.log_dir})"
    )
    return state


def _process_spec(
    name: str, argv: Any, log_path: str, port: int, health: str, spec: ClusterSpec
) -> ProcessSpec:
    return ProcessSpec(
        name=name,
        argv=tuple(argv),
        log_path=log_path,
        health_url=f"http://127.0.0.1:{port}{health}",
        restart=spec.restart,
    )


def _router_ready(router_url: str, workers: list[WorkerPlan]) -> bool:
    from sglang_engram.cluster import router_api

    if not probe(f"{router_url}/readiness"):
        return False
    try:
        listed = {w["url"].rstrip("/"): w for w in router_api.list_workers(router_url)}
    except router_api.RouterError:
        return False
    return all(listed.get(w.url, {}).get("is_healthy") for w in workers)


def _wait(
    actors: dict[str, Any],
    done: Callable[[dict[str, Any]], bool],
    what: str,
    timeout_s: float,
    say: Say,
) -> None:
    """Poll the actors until ``done`` holds for each; report changes and progress."""
    import ray

    start = last_report = time.monotonic()
    seen: dict[str, str] = {}
    while True:
        statuses = dict(
            zip(actors, ray.get([a.status.remote() for a in actors.values()]), strict=True)
        )
        for name, s in statuses.items():
            if s["state"] != seen.get(name):
                seen[name] = s["state"]
                say(f"  {name}: {s['state']}")
            if s["state"] == "failed":
                tail = "\n    ".join(ray.get(actors[name].log_tail.remote(15)))
                raise LaunchError(f"{name} failed to start; last lines of {s['log']}:\n    {tail}")
        if all(done(s) for s in statuses.values()):
            return
        elapsed = time.monotonic() - start
        if elapsed > timeout_s:
            raise LaunchError(f"timed out after {timeout_s:g}s waiting for {what}")
        if time.monotonic() - last_report >= _PROGRESS_EVERY_S:
            last_report = time.monotonic()
            summary = ", ".join(f"{n} {s['state']}" for n, s in statuses.items())
            say(f"waiting for {what} ({elapsed:.0f}s): {summary}")
        time.sleep(0.5)


def _watch(state: ClusterState, say: Say, interval_s: float = 2.0) -> None:
    """Report state changes until interrupted or until ``down`` ran elsewhere."""
    seen: dict[str, tuple[Any, ...]] = {}
    health = "healthy"
    while True:
        time.sleep(interval_s)
        try:
            on_disk = ClusterState.load(state.name)
        except ClusterNotFound:
            on_disk = None
        if on_disk is None or on_disk.phase == "stopping":
            say("the cluster is being taken down by another command")
            # NOTE: a local Ray cluster ends with this process: let `down` finish first.
            deadline = time.monotonic() + 300
            while state.path.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            return
        status = collect_status(state)
        for m in [status["router"], *status["workers"]]:
            reg = (m.get("router") or {}).get("registered")
            key = (m["state"], m.get("restarts"), reg)
            if seen.get(m["name"], key) != key:
                extra = "" if reg is None else f", {'registered' if reg else 'not registered'}"
                say(f"{m['name']}: {m['state']}, restarts {m.get('restarts', '-')}{extra}")
            seen[m["name"]] = key
        if status["health"] != health:
            health = status["health"]
            say(f"cluster {state.name}: {health}")
