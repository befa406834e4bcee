"""``python -m sglang_engram.cluster {plan,up,status,down}``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

from sglang_engram.cluster.spec import ClusterSpecError
from sglang_engram.cluster.spec_loader import load_spec
from sglang_engram.cluster.state import HOME_ENV, ClusterNotFound, ClusterState, run_dir

_DESCRIPTION = f"""\
Run a PD-disaggregated sglang-engram deployment on a Ray cluster: prefill workers that
keep the Engram tables, decode workers with the tables offloaded to DRAM or off, the KV
cache passed from prefill to decode by the transfer backend, and the sglang-router in
front splitting each request.

  plan    print every worker's and the router's command, host, GPUs and ports; starts nothing
  up      start the cluster and supervise it (foreground until Ctrl-C, or --detach)
  status  each worker's state, restarts, router registration and Engram memory
  down    stop everything `up` started, and nothing else

`up` keeps its state (state.json) and the per-worker logs in ${HOME_ENV}/<name>/
(default ~/.cache/sglang-engram/cluster/<name>/), so `status` and `down` work from any
shell on the `up` host. `status` exits 0 when the cluster is healthy, starting or
recovering, 2 when it is degraded, 1 when it is not found.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_engram.cluster",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    address_help = (
        "Ray cluster to use, HOST:PORT of its head (default $RAY_ADDRESS; without one, "
        "`up` starts a local Ray cluster that ends with it)"
    )
    gpus_help = "GPUs this host offers when no --address is given (default: detected)"

    plan = sub.add_parser("plan", help="print the resolved plan without starting anything")
    plan.add_argument("spec", help="cluster spec (YAML); see examples/pd-cluster.yaml")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument(
        "--address",
        default=os.environ.get("RAY_ADDRESS"),
        help="plan against this Ray cluster's nodes (connects, starts nothing)",
    )
    plan.add_argument("--num-gpus", type=float, help=gpus_help)
    plan.add_argument(
        "--log-dir",
        help="per-worker log directory (default: the spec's "
        "log_dir, else the cluster's run directory)",
    )

    up = sub.add_parser("up", help="start the cluster and supervise it")
    up.add_argument("spec", help="cluster spec (YAML)")
    up.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help=address_help)
    up.add_argument(
        "--num-gpus",
        type=float,
        help="GPUs the local Ray cluster advertises (only without --address)",
    )
    up.add_argument(
        "--detach",
        action="store_true",
        help="return once the cluster is ready and leave it running (needs "
        "--address: the actors live in the Ray cluster, supervised there)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds to wait for the workers' /health and the router (default 1800)",
    )
    up.add_argument("--log-dir", help="per-worker log directory (same path on every node)")

    for name, text in (("status", "show the cluster's state"), ("down", "stop the cluster")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("spec", nargs="?", help="the spec the cluster was started from")
        cmd.add_argument("--name", help="the cluster's name (instead of the spec)")
        if name == "status":
            cmd.add_argument("--json", action="store_true", help="print the status as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except (ClusterSpecError, ClusterNotFound) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - launch errors end as one clear line
        from sglang_engram.cluster.ray_session import RayUnreachable
        from sglang_engram.cluster.up import LaunchError

        if isinstance(exc, (LaunchError, RayUnreachable)):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise


def _plan(args: argparse.Namespace) -> int:
    from sglang_engram.cluster.placement import local_ip, local_node
    from sglang_engram.cluster.plan import build_plan

    spec = load_spec(args.spec)
    log_dir = args.log_dir or spec.log_dir or str(run_dir(spec.name) / "logs")
    if args.address:
        import ray

        from sglang_engram.cluster import ray_session

        ray_session.connect(args.address, spec.namespace)
        try:
            nodes, router_host = ray_session.cluster_nodes(), ray.util.get_node_ip_address()
        finally:
            ray_session.disconnect()
    else:
        nodes, router_host = [local_node(args.num_gpus)], local_ip()
    plan = build_plan(spec, nodes, router_host=router_host, log_dir=log_dir)
    print(json.dumps(plan.to_dict(), indent=2) if args.json else plan.render())
    return 0


def _up(args: argparse.Namespace) -> int:
    from sglang_engram.cluster.up import UpOptions, up

    spec = load_spec(args.spec)
    for warning in spec.warnings:
        print(f"warning: {warning}", flush=True)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the cluster like Ctrl-C

    signal.signal(signal.SIGTERM, on_term)
    options = UpOptions(
        address=args.address,
        num_gpus=args.num_gpus,
        detach=args.detach,
        timeout_s=args.timeout,
        log_dir=args.log_dir,
    )
    return up(spec, options, say=lambda line: print(line, flush=True))


def _attach(args: argparse.Namespace) -> ClusterState | None:
    """Load the cluster's state and connect to its Ray; None (state dropped) if Ray is gone."""
    from sglang_engram.cluster import ray_session

    if not (args.spec or args.name):
        raise ClusterSpecError("name the cluster: give its spec file or --name")
    name = args.name or load_spec(args.spec).name
    state = ClusterState.load(name)
    ray_session.use_auth_mode(state.ray_auth_mode)
    try:
        ray_session.connect(state.ray_address, state.namespace)
    except ray_session.RayUnreachable:
        print(
            f"cluster {name}: its Ray cluster at {state.ray_address} is gone "
            "(a local one ends with its `up`); dropping the stale state"
        )
        state.remove()
        return None
    return state


def _status(args: argparse.Namespace) -> int:
    from sglang_engram.cluster import ray_session
    from sglang_engram.cluster.control import collect_status, render_status

    state = _attach(args)
    if state is None:
        return 1
    try:
        status = collect_status(state)
    finally:
        ray_session.disconnect()
    print(json.dumps(status, indent=2) if args.json else render_status(status))
    return 2 if status["health"] == "degraded" else 0


def _down(args: argparse.Namespace) -> int:
    from sglang_engram.cluster import ray_session
    from sglang_engram.cluster.control import teardown

    state = _attach(args)
    if state is None:
        return 0
    try:
        state = state.with_phase("stopping")
        teardown(state, say=lambda line: print(line, flush=True))
        state.remove()
    finally:
        ray_session.disconnect()
    print(f"cluster {state.name} is down")
    return 0


_COMMANDS = {"plan": _plan, "up": _up, "status": _status, "down": _down}
