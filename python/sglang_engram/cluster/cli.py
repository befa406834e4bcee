"""``python -m sglang_engram.cluster {plan,up,status,down}``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from sglang_engram.cluster.spec import ClusterSpecError, load_spec
from sglang_engram.cluster.state import HOME_ENV, ClusterNotFound, ClusterState, run_dir

_DOWN_TIMEOUT_S = 600.0
INSTALL_HINT = "pip install 'sglang-engram[cluster]'"
_DESCRIPTION = f"""\
Run a PD-disaggregated sglang-engram deployment on a Ray cluster: prefill workers that
keep the Engram tables, decode workers with the tables offloaded to DRAM or off, the KV
cache passed from prefill to decode by the transfer backend, and the sglang-router in
front splitting each request.

  plan    print every worker's and the router's command, host, GPUs and ports; starts nothing
  up      start the cluster and supervise it in the foreground until Ctrl-C, SIGTERM or `down`
  status  each worker's state, restarts, router registration and Engram memory (as `up`
          last polled them, every 2 s)
  down    stop the cluster (asks its `up` to stop everything it started, and nothing else)

`up` keeps its state (state.json) and the per-worker logs in ${HOME_ENV}/<name>/
(default ~/.cache/sglang-engram/cluster/<name>/), so `status` and `down` work from any
shell on the `up` host. `status` exits 0 when the cluster is healthy, starting or
recovering, 2 when it is degraded, 1 when it is not found.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sglang_engram.cluster",
                                     description=_DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("plan", "print the resolved plan without starting anything"),
                       ("up", "start the cluster and supervise it until stopped")):  # fmt: skip
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("spec", help="cluster spec (YAML); see examples/pd-cluster.yaml")
        cmd.add_argument(
            "--address",
            default=os.environ.get("RAY_ADDRESS"),
            help="Ray cluster, HOST:PORT of its head (default $RAY_ADDRESS; without one, `up` "
            "starts a local Ray cluster that ends with it)",
        )
        cmd.add_argument("--num-gpus", type=float,
                         help="GPUs this host offers without --address (default: detected)")  # fmt: skip
        cmd.add_argument("--log-dir", help="per-worker log directory, the same path on every "
                         "node (default: the spec's log_dir, else the cluster's run directory)")  # fmt: skip
    sub.choices["plan"].add_argument("--json", action="store_true", help="print it as JSON")
    sub.choices["up"].add_argument(
        "--timeout", type=float, default=1800.0,
        help="seconds to wait for the GPUs, the workers' /health and the router (default 1800)",
    )  # fmt: skip
    for name, text in (("status", "show the cluster's state"), ("down", "stop the cluster")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("spec", nargs="?", help="the spec the cluster was started from")
        cmd.add_argument("--name", help="the cluster's name (instead of the spec)")
        if name == "status":
            cmd.add_argument("--json", action="store_true", help="print the status as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from sglang_engram.cluster.ray_session import RayUnreachable, missing_packages

    try:
        missing = missing_packages()
        if missing:
            raise ClusterSpecError(f"the cluster launcher needs {' and '.join(missing)}: "
                                   f"{INSTALL_HINT}")  # fmt: skip
        return _COMMANDS[args.command](args)
    except (ClusterSpecError, ClusterNotFound, RayUnreachable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - launch errors end as one clear line
        from sglang_engram.cluster.up import LaunchError

        if isinstance(exc, LaunchError):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise


def _plan(args: argparse.Namespace) -> int:
    from sglang_engram.cluster import ray_session
    from sglang_engram.cluster.layout import local_ip, local_node
    from sglang_engram.cluster.plan import build_plan

    spec = load_spec(args.spec)
    log_dir = args.log_dir or spec.log_dir or str(run_dir(spec.name) / "logs")
    if args.address:
        import ray

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
    options = UpOptions(address=args.address, num_gpus=args.num_gpus, timeout_s=args.timeout,
                        log_dir=args.log_dir)  # fmt: skip
    return up(spec, options, say=lambda line: print(line, flush=True))


def _running(args: argparse.Namespace) -> ClusterState | None:
    """The cluster's state while its `up` runs; None (state dropped) once `up` is gone."""
    if not (args.spec or args.name):
        raise ClusterSpecError("name the cluster: give its spec file or --name")
    state = ClusterState.load(args.name or load_spec(args.spec).name)
    if state.up_alive:
        return state
    print(f"cluster {state.name}: its `up` (pid {state.up_pid}) is gone, and with it "
          "everything it started; dropping the stale state")  # fmt: skip
    state.remove()
    return None


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
    if state is not None:
        print(f"asking `up` (pid {state.up_pid}) to stop cluster {state.name} ...", flush=True)
        os.kill(state.up_pid, signal.SIGTERM)
        deadline = time.monotonic() + _DOWN_TIMEOUT_S
        while state.up_alive:
            if time.monotonic() > deadline:
                print(f"error: `up` (pid {state.up_pid}) is still stopping after "
                      f"{_DOWN_TIMEOUT_S:g} s; see its output and the logs in {state.log_dir}",
                      file=sys.stderr)  # fmt: skip
                return 1
            time.sleep(0.5)
        print(f"cluster {state.name} is down")
    return 0


_COMMANDS = {"plan": _plan, "up": _up, "status": _status, "down": _down}
