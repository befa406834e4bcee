"""``python -m sglang_engram.cluster {plan,up,status,down}``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time

from engram.cli import Parser, RawDescriptionFormatter, number, run
from sglang_engram.cluster.spec import ClusterError, ClusterSpecError, load_spec
from sglang_engram.cluster.state import HOME_ENV, ClusterState
from sglang_engram.extras import require_extra

_DESCRIPTION = f"""\
Run a PD-disaggregated sglang-engram deployment on a Ray cluster: prefill workers that
keep the Engram tables, decode workers with the tables offloaded to DRAM or off, and the
sglang-router in front splitting each request.

  plan    print every worker's and the router's command, host, GPUs and ports; starts nothing
  up      start the cluster and supervise it in the foreground until Ctrl-C, SIGTERM or `down`
  status  each worker's state, restarts, router registration and Engram memory
  down    stop the cluster (asks its `up` to stop everything it started, and nothing else)

`up` keeps its state and the logs in ${HOME_ENV}/<name>/ (default
~/.cache/sglang-engram/cluster/<name>/), so `status` and `down` work from any shell on the
`up` host. `status` exits 0 when the cluster is healthy, starting or recovering, 2 when it
is degraded, 1 when it is not found. Bad input (a spec, a flag) is one `error:` line and
exit 2; a failure while starting or stopping is one `error:` line and exit 1.
"""


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m sglang_engram.cluster",
        description=_DESCRIPTION,
        formatter_class=RawDescriptionFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="print the resolved plan without starting anything")
    plan.add_argument("--json", action="store_true", help="print it as JSON")
    up = sub.add_parser("up", help="start the cluster and supervise it until stopped")
    up.add_argument(
        "--timeout",
        type=number(float, above=0),
        default=1800.0,
        help="seconds to wait for the GPUs, the workers' /health and the router",
    )
    for cmd in (plan, up):
        cmd.add_argument("spec", help="cluster spec (YAML); see examples/pd-cluster.yaml")
        cmd.add_argument(
            "--address",
            default=os.environ.get("RAY_ADDRESS"),
            help="Ray cluster, HOST:PORT of its head (default $RAY_ADDRESS; without one, `up` "
            "starts a local Ray cluster that ends with it)",
        )
        cmd.add_argument(
            "--num-gpus",
            type=number(at_least=1),
            help="GPUs of this host without --address (default: the GPUs Ray would detect)",
        )
        cmd.add_argument("--log-dir", help="log directory, the same path on every node")
    status = sub.add_parser("status", help="show the cluster's state")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    down = sub.add_parser("down", help="stop the cluster")
    for cmd in (status, down):
        cmd.add_argument("spec", nargs="?", help="the spec the cluster was started from")
        cmd.add_argument("--name", help="the cluster's name (instead of the spec)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def body() -> int:
        require_extra("cluster", "the cluster launcher")
        return _COMMANDS[args.command](args)

    # NOTE: a spec or flag at fault exits 2; anything else the cluster reports (Ray
    # unreachable, a worker that cannot start, a cluster not found) is a failure, 1.
    return run(body, args, usage=(ClusterSpecError,), runtime=(ClusterError,))


def _plan(args: argparse.Namespace) -> int:
    import ray

    from sglang_engram.cluster.assignment import local_node, ray_nodes
    from sglang_engram.cluster.plan import build_plan
    from sglang_engram.cluster.ray_session import connect

    spec = load_spec(args.spec)
    # NOTE: the router runs where `up` runs: here, at this host's node's address (asked
    # while connected: Ray's own guess needs a route to the internet).
    if args.address:
        try:
            connect(args.address, spec.namespace)
            nodes = ray_nodes(spec.device)
            router_host = ray.util.get_node_ip_address()
        finally:
            ray.shutdown()
    else:
        nodes = [local_node(args.num_gpus, spec.device)]
        router_host = nodes[0].ip
    plan = build_plan(spec, nodes, router_host=router_host, log_dir=args.log_dir)
    print(json.dumps(plan.to_dict(), indent=2) if args.json else plan.render())
    return 0


def _up(args: argparse.Namespace) -> int:
    from sglang_engram.cluster.up import up

    spec = load_spec(args.spec)
    for warning in spec.warnings:
        print(f"warning: {warning}", flush=True)
    return up(
        spec,
        address=args.address,
        num_gpus=args.num_gpus,
        timeout_s=args.timeout,
        log_dir=args.log_dir,
        say=lambda line: print(line, flush=True),
    )


def _running(args: argparse.Namespace) -> ClusterState | None:
    """The cluster's state while its `up` runs; None (state dropped) once `up` is gone."""
    if not (args.spec or args.name):
        raise ClusterSpecError("name the cluster: give its spec file or --name")
    name = args.name or load_spec(args.spec).name
    state = ClusterState.running(name)
    if state is None:
        print(f"cluster {name}: its `up` is gone, and with it everything it started")
    return state


def _status(args: argparse.Namespace) -> int:
    from sglang_engram.cluster.status import collect_status, render_status

    state = _running(args)
    if state is None:
        return 1
    status = collect_status(state)
    print(json.dumps(status, indent=2) if args.json else render_status(status))
    return 2 if status["health"] == "degraded" else 0


def _down(args: argparse.Namespace) -> int:
    state = _running(args)
    if state is None:
        return 0
    print(f"asking `up` (pid {state.up_pid}) to stop cluster {state.name} ...", flush=True)
    os.kill(state.up_pid, signal.SIGTERM)
    deadline = time.monotonic() + 600
    while state.up_alive:
        if time.monotonic() > deadline:
            raise ClusterError(
                f"`up` (pid {state.up_pid}) is still stopping after 600 s; see its output and "
                f"the logs in {state.plan['log_dir']}"
            )
        time.sleep(0.5)
    print(f"cluster {state.name} is down")
    return 0


_COMMANDS = {"plan": _plan, "up": _up, "status": _status, "down": _down}
