"""``up``: start the workers, wait for health, start the router, supervise until stopped.

Order: the cluster's keys (``keys``); one named actor per worker, pinned to its planned
node and holding its GPUs, running the SGLang server; every /health answered; then the
router in PD mode with all prefill and decode URLs (on the node running ``up``); then
each worker's registration loop. ``up`` stays in the foreground, polling the actors into
the state file (which ``status`` reads), reporting changes and starting again the
workers of a node that is gone (``node_loss``), until Ctrl-C or SIGTERM (which ``down``
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
from pathlib import Path

import psutil

from sglang_engram.cluster.assignment import check_num_gpus, ray_nodes
from sglang_engram.cluster.keys import load_keys
from sglang_engram.cluster.plan import build_plan
from sglang_engram.cluster.ports import ephemeral_warning
from sglang_engram.cluster.ray_session import connect
from sglang_engram.cluster.running import Interrupted, LaunchError, RunningCluster, Say
from sglang_engram.cluster.spec import ClusterSpec
from sglang_engram.cluster.state import ClusterNotFound, ClusterState


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
    keys = load_keys(spec)
    import ray

    say(f"connecting to Ray at {address}" if address else "starting a local Ray cluster")
    ray_address = connect(address, spec.namespace, num_gpus=num_gpus)
    # NOTE: after ray.init, which installs a SIGTERM handler of its own. The handler only
    # sets a flag that the loops below check: an exception raised at an arbitrary point
    # (inside a Ray call) could leave Ray unable to stop the actors.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGTERM is what `down` sends
        signal.signal(sig, lambda signum, frame: stop.set())
    cluster: RunningCluster | None = None
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
        cluster = RunningCluster(plan, state, say, stop, keys)
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
            say(("interrupted; " if isinstance(exc, Interrupted) else "") + "stopping ...")
            cluster.stop()
        if isinstance(exc, Interrupted):
            return 130  # stopped before the cluster was ready
        raise
    finally:
        ray.shutdown()
