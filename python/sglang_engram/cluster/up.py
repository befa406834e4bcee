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
from pathlib import Path
from typing import Any

import psutil

from sglang_engram.cluster.assignment import check_num_gpus, ray_nodes
from sglang_engram.cluster.plan import ClusterPlan, ProcessPlan, build_plan
from sglang_engram.cluster.ports import ephemeral_warning
from sglang_engram.cluster.prompt_limits import longest_prompt, mismatch
from sglang_engram.cluster.ray_session import connect
from sglang_engram.cluster.registration import RouterError, list_workers
from sglang_engram.cluster.spec import ClusterError, ClusterSpec
from sglang_engram.cluster.state import ClusterNotFound, ClusterState
from sglang_engram.cluster.status import collect_status, poll
from sglang_engram.cluster.supervisor import ProcessCommand
from sglang_engram.server_process import probe

Say = Callable[[str], None]


class LaunchError(ClusterError):
    """The cluster could not be brought up; what was started has been stopped."""


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM before the cluster was ready."""


def up(
    spec: ClusterSpec,
    *,
    address: str | None = None,
    num_gpus: float | None = None,
    timeout_s: float = 1800.0,
    log_dir: str | None = None,
    say: Say = print,
) -> int:
    try:
        old = ClusterState.running(spec.name)  # a stale state is dropped
    except ClusterNotFound:
        old = None
    if old is not None:
        raise LaunchError(
            f"cluster {spec.name!r} is already up (up pid {old.up_pid}); "
            f"run `python -m sglang_engram.cluster down --name {spec.name}` first"
        )
    check_num_gpus(spec.device, num_gpus)
    import ray

    say(f"connecting to Ray at {address}" if address else "starting a local Ray cluster")
    ray_address = connect(address, spec.namespace, num_gpus=num_gpus)
    # NOTE: after ray.init, which installs a SIGTERM handler of its own. The handler only
    # sets a flag that the loops below check: an exception raised at an arbitrary point
    # (inside a Ray call) could leave Ray unable to stop the actors.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGTERM is what `down` sends
        signal.signal(sig, lambda signum, frame: stop.set())
    cluster: _Cluster | None = None
    try:
        driver_ip = ray.util.get_node_ip_address()
        plan = build_plan(spec, ray_nodes(spec.device), router_host=driver_ip, log_dir=log_dir)
        if warning := ephemeral_warning(plan.ports):
            say(f"warning: {warning}")
        Path(plan.log_dir).mkdir(parents=True, exist_ok=True)
        state = ClusterState(
            name=spec.name,
            ray_address=ray_address,
            local_ray=not address,
            up_pid=os.getpid(),
            up_started=psutil.Process().create_time(),
            plan=plan.to_dict(),
        )
        state.save()
        cluster = _Cluster(plan, state, say, stop)
        cluster.launch(time.monotonic() + timeout_s)
        say(
            f"supervising; Ctrl-C (or `python -m sglang_engram.cluster down --name {spec.name}`)"
            " stops the cluster"
        )
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
        ray.shutdown()


class _Cluster:
    """What one `up` started: its actors, and the state file it keeps current."""

    def __init__(
        self, plan: ClusterPlan, state: ClusterState, say: Say, stop: threading.Event
    ) -> None:
        self.plan, self.state, self.say = plan, state, say
        self.stop_requested = stop  # set by Ctrl-C or SIGTERM
        self.actors: dict[str, Any] = {}  # the router last, once it runs
        self._seen: dict[str, tuple[Any, ...]] = {}  # what was last reported of each

    def _actor(
        self, name: str, p: ProcessPlan, health: str, node_id: str, gpus: float, **kw: Any
    ) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from sglang_engram.cluster.actor import RemoteServerActor

        process = ProcessCommand(
            name=name,
            argv=p.command,
            env=p.env,
            log_path=p.log,
            health_url=f"http://127.0.0.1:{p.port}{health}",
            ports=tuple(self.plan.ports_of(name).values()),
            restart=self.plan.spec.restart,
        )
        self.actors[name] = RemoteServerActor.options(
            name=name,
            namespace=self.plan.spec.namespace,
            num_cpus=0,
            num_gpus=gpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(process, port=p.port, **kw)
        return self.actors[name]

    def launch(self, deadline: float) -> None:
        import ray

        for w in self.plan.workers:
            kw = dict(role=w.role, bootstrap_port=w.bootstrap_port)
            self._actor(w.name, w, "/health", w.node_id, w.gpus, **kw)
        gpus = self.plan.spec.device == "gpu"
        what = "give {} workers their GPUs" if gpus else "start {} workers"
        self.say(f"waiting for Ray to {what.format(len(self.actors))} ...")
        refs = {name: a.start.remote() for name, a in self.actors.items()}
        ready: list[Any] = []
        while len(ready) < len(refs) and _left(deadline):
            if self.stop_requested.is_set():
                raise _Interrupted
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
        if warning := mismatch({n: (roles[n], longest_prompt(u)) for n, u in urls.items()}):
            self.say(warning)

        r = self.plan.router
        node = ray.get_runtime_context().get_node_id()
        router = self._actor("router", r, "/liveness", node, 0, role="router")
        ray.get(router.start.remote())
        what = "the router to register every worker"
        self._wait({"router": router}, lambda: _router_ready(r.url, self.plan), what, deadline)
        ray.get([a.attach_router.remote(r.url) for a in workers.values()])
        self.state = self.state.update(phase="running")
        self._poll(self.actors)
        n_prefill = sum(w.role == "prefill" for w in self.plan.workers)
        self.say(
            f"ready: {r.url} (router; {n_prefill} prefill, {len(workers) - n_prefill} decode "
            f"workers; logs in {self.plan.log_dir})"
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
                raise _Interrupted

    def watch(self, interval_s: float = 2.0) -> None:
        """Keep the state file current and report changes, until Ctrl-C or SIGTERM."""
        health = "healthy"
        while not self.stop_requested.wait(interval_s):
            self._poll(self.actors)
            if (now := collect_status(self.state)["health"]) != health:
                health = now
                self.say(f"cluster {self.state.name}: {health}")

    def stop(self) -> None:
        """Stop the router, then every worker (their whole process trees), then the actors."""
        import ray

        self.state = self.state.update(phase="stopping")
        # NOTE: the router goes first, so that no request is sent to a stopping worker.
        router = [n for n in self.actors if n == "router"]
        for batch in (router, [n for n in self.actors if n != "router"]):
            refs = {name: self.actors[name].stop.remote() for name in batch}
            for name, ref in refs.items():
                try:
                    pids = ray.get(ref, timeout=120)
                    self.say(f"stopped {name} (pids {', '.join(map(str, pids)) or 'none running'})")
                except (ray.exceptions.RayError, TimeoutError) as exc:
                    self.say(
                        f"could not stop {name} cleanly ({str(exc).splitlines()[0]}); killing it"
                    )
        for handle in self.actors.values():
            ray.kill(handle, no_restart=True)
        self.state.remove()


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _router_ready(router_url: str, plan: ClusterPlan) -> bool:
    if not probe(f"{router_url}/readiness"):
        return False
    try:
        listed = {w["url"].rstrip("/"): w for w in list_workers(router_url)}
    except RouterError:
        return False
    return all(listed.get(w.url, {}).get("is_healthy") for w in plan.workers)
