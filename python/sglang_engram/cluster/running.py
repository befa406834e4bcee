"""What one ``up`` started: an actor per worker and the router's, launched in order,
polled into the state file, the workers of a lost node started again (``node_loss``),
and all of it stopped at the end.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from sglang_engram.cluster.assignment import live_nodes, ray_nodes
from sglang_engram.cluster.keys import ClusterKeys, key_files
from sglang_engram.cluster.node_loss import lost_status, lost_workers, places
from sglang_engram.cluster.plan import ClusterPlan, ProcessPlan, WorkerPlan
from sglang_engram.cluster.prompt_limits import longest_prompt, mismatch
from sglang_engram.cluster.registration import RouterError, list_workers, remove_worker
from sglang_engram.cluster.spec import ClusterError
from sglang_engram.cluster.state import ClusterState
from sglang_engram.cluster.status import collect_status, poll
from sglang_engram.cluster.supervisor import ProcessCommand
from sglang_engram.server_process import probe

Say = Callable[[str], None]


class LaunchError(ClusterError):
    """The cluster could not be brought up; what was started has been stopped."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM before the cluster was ready."""


class RunningCluster:
    """What one `up` started: its actors, and the state file it keeps current."""

    def __init__(
        self,
        plan: ClusterPlan,
        state: ClusterState,
        say: Say,
        stop: threading.Event,
        keys: ClusterKeys,
    ) -> None:
        self.plan, self.state, self.say, self.keys = plan, state, say, keys
        self.stop_requested = stop  # set by Ctrl-C or SIGTERM
        self.actors: dict[str, Any] = {}  # the router last, once it runs
        self.workers = {w.name: w for w in plan.workers}  # where each runs now
        self.lost: set[str] = set()  # workers whose node is gone
        self._seen: dict[str, tuple[Any, ...]] = {}  # what was last reported of each

    def _actor(self, name: str, p: ProcessPlan, health_url: str, node_id: str, **kw: Any) -> Any:
        self.actors[name] = remote_actor(self.plan, self.keys, name, p, health_url, node_id, **kw)
        return self.actors[name]

    def _worker_actor(self, w: WorkerPlan) -> Any:
        kw = dict(role=w.role, bootstrap_port=w.bootstrap_port, keys=self.keys)
        return self._actor(w.name, w, f"{w.url}/health", w.node_id, **kw)

    def launch(self, deadline: float) -> None:
        import ray

        for w in self.plan.workers:
            self._worker_actor(w)
        gpus = self.plan.spec.device == "gpu"
        what = "give {} workers their GPUs" if gpus else "start {} workers"
        self.say(f"waiting for Ray to {what.format(len(self.actors))} ...")
        refs = {name: a.start.remote() for name, a in self.actors.items()}
        ready: list[Any] = []
        while len(ready) < len(refs) and _left(deadline):
            if self.stop_requested.is_set():
                raise Interrupted
            ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=1.0)
        # NOTE: the refs waited on, not new ones: a fresh ref is never among `ready`.
        if late := [name for name, ref in refs.items() if ref not in ready]:
            for name in late:
                ray.kill(self.actors.pop(name))  # still waiting for GPUs: nothing of it runs
            why = "gave no GPUs to" if gpus else "did not start"
            raise LaunchError(
                f"Ray {why} {', '.join(late)} in time; are other jobs holding its resources? "
                "(`ray status`)"
            )
        urls = {}
        for name, ref in refs.items():
            info = ray.get(ref)
            urls[name] = info["url"]
            where = f"GPU {','.join(info['gpu_ids'])}" if gpus else "CPU"
            self.say(f"started {name} at {info['url']} ({where})")
        workers = dict(self.actors)
        self._wait(workers, lambda: True, "workers to answer /health", deadline)
        roles = {w.name: w.role for w in self.plan.workers}
        limits = {n: (roles[n], longest_prompt(u, self.keys.client)) for n, u in urls.items()}
        if warning := mismatch(limits):
            self.say(warning)

        r = self.plan.router
        node = ray.get_runtime_context().get_node_id()
        # NOTE: it binds every address (BIND_HOST); its health is asked here.
        router = self._actor(
            "router", r, f"http://127.0.0.1:{r.port}/liveness", node, role="router"
        )
        ray.get(router.start.remote())
        what = "the router to register every worker"
        ready = functools.partial(_router_ready, r.url, self.plan, self.keys.admin)
        self._wait({"router": router}, ready, what, deadline)
        ray.get([a.attach_router.remote(r.url) for a in workers.values()])
        self.state = self.state.update(phase="running")
        self._poll(self.actors)
        n_prefill = sum(w.role == "prefill" for w in self.plan.workers)
        self.say(
            f"ready: {r.url} (router; {n_prefill} prefill, {len(workers) - n_prefill} decode "
            f"workers; logs in {self.plan.log_dir}; clients send the key in "
            f"{key_files(self.plan.spec)[1]})"
        )

    def _poll(self, actors: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Poll ``actors`` into the state file; report each change of state, restarts or
        registration."""
        statuses = poll(actors)
        self.state = self.state.with_members(statuses)
        for name, s in statuses.items():
            reg = (s.get("router") or {}).get("registered")
            key = (s["state"], s.get("restarts"), reg)
            if self._seen.get(name) != key:
                extra = "" if reg is None else f", {'registered' if reg else 'not registered'}"
                self.say(f"{name}: {s['state']}, restarts {s.get('restarts', '-')}{extra}")
                if s["state"] == "unreachable" and name in self.workers:
                    # NOTE: its registrar cannot keep its entry in step (its node may be
                    # gone: Ray takes ~15 s to say so); it registers it again once it answers.
                    self._off_router(name)
            self._seen[name] = key
        return statuses

    def _wait(self, actors: dict[str, Any], done: Callable[[], bool], what: str, deadline: float):
        """Poll the actors until each runs and ``done()`` holds; fail on the first that
        fails, with the end of its log."""
        import ray

        start = last_report = time.monotonic()
        while True:
            statuses = self._poll(actors)
            for name, s in statuses.items():
                if s["state"] in ("failed", "unreachable"):
                    tail = (
                        ray.get(actors[name].log_tail.remote(15)) if s["state"] == "failed" else []
                    )
                    raise LaunchError(
                        f"{name} failed to start ({s['error']}); last lines of "
                        f"{s.get('log')}:\n    " + "\n    ".join(tail)
                    )
            if all(s["state"] == "running" for s in statuses.values()) and done():
                return
            if not _left(deadline):
                raise LaunchError(f"timed out waiting for {what}")
            if time.monotonic() - last_report >= 10:
                last_report = time.monotonic()
                summary = ", ".join(f"{n} {s['state']}" for n, s in statuses.items())
                self.say(f"waiting for {what} ({last_report - start:.0f}s): {summary}")
            if self.stop_requested.wait(0.5):
                raise Interrupted

    def watch(self, interval_s: float = 2.0) -> None:
        """Keep the state file current, report changes and start again the workers of a
        node that is gone, until Ctrl-C or SIGTERM."""
        health = "healthy"
        while not self.stop_requested.wait(interval_s):
            self._tend_nodes()
            self._poll(self.actors)
            if (now := collect_status(self.state)["health"]) != health:
                health = now
                self.say(f"cluster {self.state.name}: {health}")

    def _tend_nodes(self) -> None:
        """Mark lost the workers of nodes Ray has declared dead and those whose actor
        died (off the router; their actors forgotten); start again those a live node can
        run."""
        import ray

        live = live_nodes()
        running = {n: w for n, w in self.workers.items() if n not in self.lost}
        members = self.state.members
        for name, (why, node_gone) in lost_workers(running, live, members).items():
            w, pins = self.workers[name], self.plan.demand(name).pins
            self.lost.add(name)
            with contextlib.suppress(ray.exceptions.RayError, ValueError):
                ray.kill(self.actors.pop(name), no_restart=True)
            status = lost_status(members.get(name, {}), w, why, node_gone, pins)
            self.state = self.state.with_members({name: status})
            self.say(f"{name}: lost ({status['error']})")
            self._off_router(name)
        devices = ray_nodes(self.plan.spec.device)
        running = {n: w for n, w in self.workers.items() if n not in self.lost}
        for name, w in places(self.plan, sorted(self.lost), running, devices).items():
            try:
                actor = self._worker_actor(w)
            except ValueError:  # NOTE: its dead actor's name is not released yet
                continue
            self.workers[name] = w
            self.lost.discard(name)
            self.say(f"{name}: starting again on {w.host} (node {w.node_id})")
            actor.start.remote()
            actor.attach_router.remote(self.plan.router.url)
            plan = dict(self.state.plan)
            plan["workers"] = [self.workers[x["name"]].to_dict() for x in plan["workers"]]
            self.state = self.state.update(plan=plan)

    def _off_router(self, name: str) -> None:
        if self.state.phase == "running":
            with contextlib.suppress(RouterError):
                remove_worker(self.plan.router.url, self.workers[name].url, self.keys.admin)

    def stop(self) -> None:
        """Stop the router, then every worker (their whole process trees), then the actors."""
        self.state = self.state.update(phase="stopping")
        stop_actors(self.actors, self.say)
        self.state.remove()


def remote_actor(
    plan: ClusterPlan,
    cluster_keys: ClusterKeys,
    name: str,
    p: ProcessPlan,
    health_url: str,
    node_id: str,
    **kw: Any,
) -> Any:
    """The Ray actor that runs ``p`` on node ``node_id``, under a supervisor (not started);
    ``kw`` go to the actor (a worker's ``keys`` among them)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from sglang_engram.cluster.actor import RemoteServerActor

    worker = isinstance(p, WorkerPlan)
    process = ProcessCommand(
        name=name,
        argv=p.command,
        env=p.env,
        log_path=p.log,
        health_url=health_url,
        ports=tuple(plan.ports_of(name).values()),
        restart=plan.spec.restart,
        private_config=cluster_keys.worker_config if worker else cluster_keys.router_config,
        secrets=cluster_keys.secrets,
    )
    return RemoteServerActor.options(
        name=name,
        namespace=plan.spec.namespace,
        num_cpus=0,
        num_gpus=p.gpus if worker else 0,
        resources=dict(plan.demand(name).resources) if worker else {},
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(process, port=p.port, **kw)


def stop_actors(actors: dict[str, Any], say: Say) -> None:
    """Stop each actor's process tree, the router's first, then kill the actors."""
    import ray

    # NOTE: the router goes first, so that no request is sent to a stopping worker.
    router = [n for n in actors if n == "router"]
    for batch in (router, [n for n in actors if n != "router"]):
        refs = {name: actors[name].stop.remote() for name in batch}
        for name, ref in refs.items():
            try:
                pids = ray.get(ref, timeout=120)
                say(f"stopped {name} (pids {', '.join(map(str, pids)) or 'none running'})")
            except (ray.exceptions.RayError, TimeoutError) as exc:
                say(f"could not stop {name} cleanly ({str(exc).splitlines()[0]}); killing it")
    for handle in actors.values():
        ray.kill(handle, no_restart=True)


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _router_ready(router_url: str, plan: ClusterPlan, key: str) -> bool:
    if not probe(f"{router_url}/readiness"):
        return False
    try:
        listed = {w["url"].rstrip("/"): w for w in list_workers(router_url, key)}
    except RouterError:
        return False
    return all(listed.get(w.url, {}).get("is_healthy") for w in plan.workers)
