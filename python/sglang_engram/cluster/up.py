"""``up``: start the workers, wait for health, start the router, supervise until stopped.

Order: one named actor per worker, pinned to its planned node and holding its GPUs,
running the SGLang server; every /health answered; then the router in PD mode with all
prefill and decode URLs (on the node running ``up``); then each worker's registration
loop. ``up`` stays in the foreground, polling the actors into the state file (which
``status`` reads) and reporting changes, until Ctrl-C or SIGTERM (which ``down``
sends); then it stops all of it, as it does when anything fails half-way.

NOTE: one lifetime mode. The actors belong to the ``up`` process (Ray's default
lifetime), so whatever ends ``up``, even SIGKILL, ends them and their processes with
it: no cluster outlives the command that owns it, and ``up`` is the only Ray driver.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from sglang_engram.cluster import ray_session
from sglang_engram.cluster.plan import ClusterPlan, WorkerPlan, build_plan
from sglang_engram.cluster.spec import ClusterSpec
from sglang_engram.cluster.state import ROUTER_ACTOR, ClusterNotFound, ClusterState, run_dir
from sglang_engram.cluster.status import collect_status, poll
from sglang_engram.cluster.supervisor import ProcessSpec, probe

Say = Callable[[str], None]
_PROGRESS_EVERY_S = 10.0


class LaunchError(RuntimeError):
    """The cluster could not be brought up; what was started has been stopped."""


@dataclass(frozen=True)
class UpOptions:
    address: str | None = None
    num_gpus: float | None = None
    timeout_s: float = 1800.0
    log_dir: str | None = None


def up(spec: ClusterSpec, options: UpOptions, say: Say = print) -> int:
    _refuse_if_running(spec.name)
    import ray

    say(f"connecting to Ray at {options.address}" if options.address
        else "starting a local Ray cluster")  # fmt: skip
    address, local = ray_session.connect(options.address, spec.namespace, num_gpus=options.num_gpus)
    # NOTE: after ray.init, which installs a SIGTERM handler of its own. The handler only
    # sets a flag that the loops below check: an exception raised at an arbitrary point
    # (inside a Ray call) could leave Ray unable to stop the actors.
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGTERM is what `down` sends
        signal.signal(sig, lambda signum, frame: _STOP.set())
    cluster: _Cluster | None = None
    try:
        log_dir = options.log_dir or spec.log_dir or str(run_dir(spec.name) / "logs")
        driver_ip = ray.util.get_node_ip_address()
        plan = build_plan(spec, ray_session.cluster_nodes(), router_host=driver_ip, log_dir=log_dir)
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        state = ClusterState(
            name=spec.name,
            ray_address=address,
            local_ray=local,
            up_pid=os.getpid(),
            up_started=psutil.Process().create_time(),
            log_dir=log_dir,
            workers=tuple(w.name for w in plan.workers),
            plan=plan.to_dict(),
        )
        state.save()
        cluster = _Cluster(plan, state, say)
        cluster.launch(time.monotonic() + options.timeout_s)
        say(f"supervising; Ctrl-C (or `python -m sglang_engram.cluster down --name {spec.name}`)"
            " stops the cluster")  # fmt: skip
        cluster.watch()
        say("stopping ...")
        cluster.stop()
        return 0
    except BaseException as exc:
        if cluster is not None:
            say(("interrupted; " if isinstance(exc, _Interrupted) else "") + "stopping ...")
            cluster.stop()
        if isinstance(exc, _Interrupted):
            return 130  # stopped before the cluster was ready
        raise
    finally:
        ray_session.disconnect()


_STOP = threading.Event()


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM before the cluster was ready."""


def _refuse_if_running(name: str) -> None:
    try:
        old = ClusterState.load(name)
    except ClusterNotFound:
        return
    if not old.up_alive:
        old.remove()  # stale: its `up` is gone, and everything it started with it
        return
    raise LaunchError(
        f"cluster {name!r} is already up (up pid {old.up_pid}); "
        f"run `python -m sglang_engram.cluster down --name {name}` first"
    )


class _Cluster:
    """What one `up` started: its actors, and the state file it keeps current."""

    def __init__(self, plan: ClusterPlan, state: ClusterState, say: Say) -> None:
        self.plan, self.state, self.say = plan, state, say
        self.actors: dict[str, Any] = {}  # the router last, once it runs

    def launch(self, deadline: float) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from sglang_engram.cluster.actor import RemoteServerActor

        spec, say = self.plan.spec, self.say

        def actor(name: str, node_id: str, gpus: float, process: ProcessSpec, **kw: Any) -> Any:
            return RemoteServerActor.options(
                name=name,
                namespace=spec.namespace,
                num_cpus=0,
                num_gpus=gpus,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(process, **kw)

        for w in self.plan.workers:
            process = _process(w.name, w.command, w.log, w.port, "/health", spec)
            self.actors[w.name] = actor(w.name, w.node_id, w.gpus, process, role=w.role,
                                        port=w.port, bootstrap_port=w.bootstrap_port)  # fmt: skip
        say(f"waiting for Ray to give {len(self.actors)} workers their GPUs ...")
        refs = {name: a.start.remote() for name, a in self.actors.items()}
        ready: list[Any] = []
        while len(ready) < len(refs) and _left(deadline):
            _check_stop()
            ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=min(1.0, _left(deadline)))
        # NOTE: the refs waited on, not new ones: a fresh ref is never among `ready`.
        late = [name for name, ref in refs.items() if ref not in ready]
        if late:
            for name in late:
                ray.kill(self.actors.pop(name))  # still waiting for GPUs: nothing of it runs
            raise LaunchError(f"Ray gave no GPUs to {', '.join(late)} in time; are other jobs "
                              "holding them? (`ray status`)")  # fmt: skip
        for name, ref in refs.items():
            info = ray.get(ref)
            say(f"started {name} at {info['url']} (GPU {','.join(info['gpu_ids'])})")
        workers = dict(self.actors)
        self._wait(workers, lambda s: s["state"] == "running", "workers to answer /health",
                   deadline)  # fmt: skip

        r = self.plan.router
        node = ray.get_runtime_context().get_node_id()
        process = _process("router", r.command, r.log, r.port, "/liveness", spec)
        router = self.actors[ROUTER_ACTOR] = actor(ROUTER_ACTOR, node, 0, process,
                                                   role="router", port=r.port)  # fmt: skip
        ray.get(router.start.remote())
        self._wait(
            {ROUTER_ACTOR: router},
            lambda s: s["state"] == "running" and _router_ready(r.url, self.plan.workers),
            "the router to register every worker",
            deadline,
        )
        ray.get([a.attach_router.remote(r.url) for a in workers.values()])
        self.state = self.state.update(phase="running", router_url=r.url)
        self.state = self.state.with_members(poll(self.actors))
        n_prefill = sum(w.role == "prefill" for w in self.plan.workers)
        say(f"ready: {r.url} (router; {n_prefill} prefill, {len(workers) - n_prefill} decode "
            f"workers; logs in {self.plan.log_dir})")  # fmt: skip

    def _wait(self, actors: dict[str, Any], done: Callable[[dict[str, Any]], bool], what: str,
              deadline: float) -> None:  # fmt: skip
        """Poll the actors until ``done`` holds for each; report changes, progress, failures."""
        import ray

        start = last_report = time.monotonic()
        seen: dict[str, str] = {}
        while True:
            statuses = poll(actors)
            self.state = self.state.with_members(statuses)
            for name, s in statuses.items():
                if s["state"] != seen.get(name):
                    seen[name] = s["state"]
                    self.say(f"  {name}: {s['state']}")
                if s["state"] in ("failed", "unreachable"):
                    tail = "\n    ".join(ray.get(actors[name].log_tail.remote(15))
                                          if s["state"] == "failed" else [])  # fmt: skip
                    raise LaunchError(f"{name} failed to start ({s['error']}); last lines of "
                                      f"{s.get('log')}:\n    {tail}")  # fmt: skip
            if all(done(s) for s in statuses.values()):
                return
            if not _left(deadline):
                raise LaunchError(f"timed out waiting for {what}")
            if time.monotonic() - last_report >= _PROGRESS_EVERY_S:
                last_report = time.monotonic()
                summary = ", ".join(f"{n} {s['state']}" for n, s in statuses.items())
                self.say(f"waiting for {what} ({last_report - start:.0f}s): {summary}")
            if _STOP.wait(0.5):
                raise _Interrupted

    def watch(self, interval_s: float = 2.0) -> None:
        """Keep the state file current and report changes, until Ctrl-C or SIGTERM."""
        seen: dict[str, tuple[Any, ...]] = {}
        health = "healthy"
        while not _STOP.wait(interval_s):
            self.state = self.state.with_members(poll(self.actors))
            status = collect_status(self.state)
            for m in [status["router"], *status["workers"]]:
                reg = (m.get("router") or {}).get("registered")
                key = (m["state"], m.get("restarts"), reg)
                if seen.get(m["name"], key) != key:
                    extra = "" if reg is None else f", {'registered' if reg else 'not registered'}"
                    self.say(f"{m['name']}: {m['state']}, restarts {m.get('restarts', '-')}{extra}")
                seen[m["name"]] = key
            if status["health"] != health:
                health = status["health"]
                self.say(f"cluster {self.state.name}: {health}")

    def stop(self) -> None:
        """Stop the router, then every worker (their whole process trees), then the actors."""
        import ray

        self.state = self.state.update(phase="stopping")
        names = list(self.actors)
        # NOTE: the router goes first, so that no request is sent to a stopping worker.
        for batch in ([n for n in names if n == ROUTER_ACTOR], [n for n in names if n != ROUTER_ACTOR]):  # fmt: skip
            refs = {name: self.actors[name].stop.remote() for name in batch}
            for name, ref in refs.items():
                try:
                    pids = ray.get(ref, timeout=120)
                    self.say(f"stopped {name} (pids {', '.join(map(str, pids)) or 'none running'})")
                except (ray.exceptions.RayError, TimeoutError) as exc:
                    self.say(f"could not stop {name} cleanly ({str(exc).splitlines()[0]}); killing it")
        for handle in self.actors.values():
            ray.kill(handle, no_restart=True)
        self.state.remove()


def _check_stop() -> None:
    if _STOP.is_set():
        raise _Interrupted


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _process(name: str, argv: Any, log: str, port: int, health: str, spec: ClusterSpec) -> ProcessSpec:
    return ProcessSpec(name=name, argv=tuple(argv), log_path=log,
                       health_url=f"http://127.0.0.1:{port}{health}", restart=spec.restart)  # fmt: skip


def _router_ready(router_url: str, workers: tuple[WorkerPlan, ...]) -> bool:
    from sglang_engram.cluster.registration import RouterError, list_workers

    if not probe(f"{router_url}/readiness"):
        return False
    try:
        listed = {w["url"].rstrip("/"): w for w in list_workers(router_url)}
    except RouterError:
        return False
    return all(listed.get(w.url, {}).get("is_healthy") for w in workers)
