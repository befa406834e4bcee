"""A PD cluster under load and faults: every request answered or refused within a bound,
service restored after every fault, no completed answer wrong, nothing growing.

Brings up ``--spec`` (``examples/pd-cluster-cpu.yaml``) with ``python -m
sglang_engram.cluster up``, drives streaming greedy requests at a fixed concurrency for
``--duration`` seconds (``soak_load``: real-text or random-id prompts, each request
timed), and every ``--fault-every`` seconds after ``--warmup`` SIGKILLs or SIGSTOPs a
prefill worker, a decode worker or the router (``soak_faults``; the kinds dealt evenly,
each to a component that is up, none more than three ahead of the others). The
cluster's supervisor must bring back whatever was hit. Every ``--sample-every`` seconds
it samples RSS, open fds, ``/dev/shm`` and the Ray actors (``soak_resources``). At the
end every completed answer is checked against the reference model teacher-forced
(``engram_testing.reference``; the regime the spec's prefill and decode Engram
placements serve), and it prints requests by outcome and cause, the longest wait
against ``--bound``, time to restore per fault kind, resource growth after warm-up,
writes ``soak.png``, ``soak.json`` and ``requests.csv`` under ``--out``, and ends with one line of JSON.
Exit 0 when all of it holds (with at least ``--min-faults`` of every kind), 1 when not.

    python benchmark/soak_pd.py                       # 20 minutes, six kinds of fault
    python benchmark/soak_pd.py --duration 2400 --min-faults 10   # >= 10 of each kind
    python benchmark/soak_pd.py --duration 300 --fault-every 40 --decode-offload dram
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from engram_testing.bench_text import bench_text
from engram_testing.soak.faults import (
    DEFAULT_KINDS,
    ClusterView,
    check_kinds,
    release,
    strike,
    update_back,
)
from engram_testing.soak.load import LoadDriver, Workload, text_pieces

from engram.cli import Parser, RawDescriptionFormatter, number, run
from engram.cli_paths import directory, existing_file
from engram.errors import EngramInputError, EngramRunError
from engram.tables import placement_names

ROOT = Path(__file__).resolve().parents[1]

# NOTE: the soak strikes each component every minute or so, far more often than any
# production policy counts restarts in a row: it lets the supervisor restart without end,
# and a component that stayed healthy 30 s starts a new row (the first backoff again),
# so that a time to restore measures the recovery, not the backoff's growth.
SOAK_RESTART = {"max_restarts": 100_000, "reset_after_s": 30.0}

AHEAD = 3  # faults a kind may be ahead of the least-struck kind

# NOTE: how many faults fit. A CPU worker takes 60-95 s to come back on a 2-core machine
# (SGLang imports itself again in each of its three processes: ~45 s to start, then the
# detection, backoff and registration), so each worker kind gets about one fault in 3-4
# minutes: 5-6 of each in 20 minutes, 10 or more in 40 (`--duration 2400`). Two servers
# per worker group (`--replicas 2`) do not help on 2 cores: four workers restarting at
# once took 130-220 s each.


def _span(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition("-")
    try:
        span = (int(lo), int(hi if sep else lo))
    except ValueError:
        span = (0, -1)
    if not 1 <= span[0] <= span[1]:
        raise argparse.ArgumentTypeError(f"must be LO-HI with 1 <= LO <= HI, not {text!r}")
    return span


def _kinds(text: str) -> list[str]:
    if text == "none":
        return []
    try:
        return check_kinds(text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    p = Parser(description=__doc__, formatter_class=RawDescriptionFormatter)
    p.add_argument(
        "--spec",
        type=existing_file,
        default=ROOT / "examples" / "pd-cluster-cpu.yaml",
        help="the cluster spec",
    )
    p.add_argument(
        "--duration", type=number(float, above=0), default=1200.0, help="seconds of load"
    )
    p.add_argument(
        "--warmup",
        type=number(float, at_least=0),
        default=60.0,
        help="seconds before the first fault",
    )
    p.add_argument(
        "--concurrency", type=number(at_least=1), default=4, help="clients sending back to back"
    )
    p.add_argument(
        "--faults",
        type=_kinds,
        default=",".join(DEFAULT_KINDS),
        help="TARGET:SIGNAL,... (targets prefill, decode, router, workers; signals kill, stop); 'none' for a soak without faults",
    )
    p.add_argument(
        "--fault-every", type=number(float, above=0), default=18.0, help="seconds between faults"
    )
    p.add_argument(
        "--min-faults",
        type=number(at_least=0),
        default=1,
        help="faults of every kind the soak must strike to pass",
    )
    p.add_argument(
        "--replicas",
        type=number(at_least=1),
        default=None,
        help="servers in each worker group (default: the spec's `count`)",
    )
    p.add_argument(
        "--bound",
        type=number(float, above=0),
        default=30.0,
        help="seconds any request may wait for its answer or error",
    )
    p.add_argument(
        "--prompts",
        choices=("text", "ids"),
        default="text",
        help="held-out benchmark text (shared prefixes) or fresh random token ids",
    )
    p.add_argument(
        "--prompt-tokens",
        type=_span,
        default="32-256",
        metavar="LO-HI",
        help="prompt length, drawn uniformly",
    )
    p.add_argument(
        "--new-tokens",
        type=_span,
        default="16-64",
        metavar="LO-HI",
        help="tokens generated, drawn uniformly",
    )
    p.add_argument(
        "--prompt-pool",
        type=number(at_least=1),
        default=48,
        help="text pieces the prompts are prefixes of",
    )
    p.add_argument(
        "--decode-offload",
        choices=placement_names(),
        help="the decode workers' Engram placement (default: the spec's)",
    )
    p.add_argument(
        "--sample-every",
        type=number(float, above=0),
        default=30.0,
        help="seconds between resource samples",
    )
    p.add_argument(
        "--restore-timeout",
        type=number(float, above=0),
        default=900.0,
        help="seconds a fault may take to be restored",
    )
    p.add_argument(
        "--request-timeout",
        type=number(float, above=0),
        default=300.0,
        help="seconds the client waits at most",
    )
    p.add_argument(
        "--startup-timeout",
        type=number(float, above=0),
        default=1800.0,
        help="seconds the cluster may take to come up",
    )
    p.add_argument("--seed", type=int, default=None, help="default: drawn fresh")
    p.add_argument(
        "--out",
        type=directory,
        default=ROOT / "out" / "soak_pd",
        help="spec, logs, soak.png, soak.json, requests.csv",
    )
    return p  # fmt: skip


def _soak_spec(args: argparse.Namespace) -> tuple[str, object]:
    """The spec the soak runs, as YAML and checked: ``--spec`` with ``SOAK_RESTART``, its
    logs under ``--out``, and ``--decode-offload``."""
    import yaml
    from sglang_engram.cluster.spec import ClusterSpecError, load_spec, parse_spec
    from sglang_engram.spec_files.yaml_file import read_mapping

    try:
        base = load_spec(args.spec)
        data = read_mapping(args.spec, ClusterSpecError, "a cluster spec")
        data.update(model=base.model, name=base.name, log_dir=str(args.out.resolve() / "logs"))
        data["restart"] = {**(data.get("restart") or {}), **SOAK_RESTART}
        for group in data["workers"]:
            if args.replicas:
                group["count"] = args.replicas
            if args.decode_offload and group.get("role") == "decode":
                group["engram_offload"] = args.decode_offload
        spec = parse_spec(data, where=str(args.spec))
    except ClusterSpecError as exc:
        raise EngramInputError(str(exc)) from None
    if not Path(spec.model).is_dir():
        raise EngramInputError(
            f"{args.spec}: model {spec.model} does not exist; build it with "
            f"`python -m engram.model build --out {spec.model} --reuse`"
        )
    return yaml.safe_dump(data, sort_keys=False), spec


def _bring_up(spec_path: Path, args: argparse.Namespace, env: dict[str, str]) -> subprocess.Popen:
    log = open(args.out / "up.log", "w")  # noqa: SIM115 (it lives as long as `up`)
    cmd = [sys.executable, "-m", "sglang_engram.cluster", "up", str(spec_path)]
    # NOTE: its own session: a Ctrl-C here reaches the soak, which stops `up` itself.
    return subprocess.Popen(
        [*cmd, "--timeout", f"{args.startup_timeout:g}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _wait_ready(up: subprocess.Popen, view: ClusterView, args: argparse.Namespace) -> None:
    from sglang_engram.cluster.spec import ClusterError

    deadline = time.monotonic() + args.startup_timeout + 60
    while time.monotonic() < deadline:
        if up.poll() is not None:
            tail = (args.out / "up.log").read_text().strip().splitlines()[-1:]
            raise EngramRunError(f"`cluster up` exited with {up.returncode}: {' '.join(tail)}")
        try:
            status = view.status()
            if status["phase"] == "running" and status["health"] == "healthy":
                return
        except (ClusterError, OSError, ValueError):
            pass  # NOTE: no state file yet, or one being replaced
        time.sleep(2)
    raise EngramRunError(f"the cluster was not healthy after {args.startup_timeout:g}s")


def _stop(up: subprocess.Popen) -> None:
    if up.poll() is None:
        up.send_signal(signal.SIGTERM)  # NOTE: what `cluster down` sends
        try:
            up.wait(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def soak(args: argparse.Namespace) -> int:
    from engram_testing.soak.report import regime_of, render, summarize
    from engram_testing.soak.resources import Sampler, growth, plot, sample
    from sglang_engram.cluster.keys import client_key

    kinds = args.faults
    if args.warmup >= args.duration:
        raise EngramInputError("--warmup must be shorter than --duration")
    spec_yaml, spec = _soak_spec(args)
    args.out.mkdir(parents=True, exist_ok=True)
    spec_path = args.out / "soak-spec.yaml"
    spec_path.write_text(spec_yaml)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    pieces, text = (), None
    if args.prompts == "text":
        pieces = text_pieces(Path(spec.model), args.prompt_tokens[1], args.prompt_pool)
        text = bench_text("heldout")
        print(f"prompts: prefixes of pieces of {text.describe()}", flush=True)
    from engram.model.config import TinyEngramConfig

    vocab = TinyEngramConfig.from_pretrained(Path(spec.model)).vocab_size
    workload = Workload(pieces, vocab, args.prompt_tokens, args.new_tokens)
    env = {**os.environ, "SGLANG_ENGRAM_CLUSTER_HOME": str(args.out.resolve() / "home")}
    os.environ["SGLANG_ENGRAM_CLUSTER_HOME"] = env["SGLANG_ENGRAM_CLUSTER_HOME"]
    view, faults, load, sampler = ClusterView(spec.name), [], None, None
    print(f"soak: {spec_path} (seed {seed}); bringing the cluster up ...", flush=True)
    up = _bring_up(spec_path, args, env)
    try:
        _wait_ready(up, view, args)
        url = f"http://127.0.0.1:{spec.router.port}"
        sampler = Sampler(args.sample_every, lambda: sample(up.pid, view.members()))
        key = client_key(spec)
        load = LoadDriver(url, workload, args.concurrency, args.request_timeout, seed, key)
        start = time.time()
        sampler.start()
        load.start()
        print(f"load on {url}: concurrency {args.concurrency} for {args.duration:g}s", flush=True)
        _drive(args, kinds, view, load, faults, rng, start)
        load.stop(args.request_timeout + 10)
        sampler.stop()
    finally:
        release(faults)
        if load is not None:
            load.stop(0)
        if sampler is not None:
            sampler.stop()
        _stop(up)
    outcomes = sorted(load.snapshot(), key=lambda o: o.sent)
    _write_requests(args.out / "requests.csv", outcomes, start)
    _serving_again(faults, outcomes)
    wrong = _check_answers(spec, outcomes)
    summary = summarize(
        outcomes,
        faults,
        wrong,
        growth(sampler.rows, start + args.warmup),
        bound_s=args.bound,
        duration_s=args.duration,
        kinds=kinds,
        detect_s=_detect_s(spec),
        min_faults=args.min_faults,
    )
    summary.update(
        seed=seed,
        concurrency=args.concurrency,
        replicas={g.name: g.count for g in spec.workers},
        regime=regime_of(*_offloads(spec)),
        text=text.record() if text else None,
    )
    plot(
        sampler.rows,
        [f.to_dict() for f in faults],
        [(o.sent, o.waited_s, o.ok) for o in outcomes],
        start,
        args.out / "soak.png",
        f"{spec.name}: {len(faults)} faults, {summary['sent']} requests, {summary['wrong']} wrong",
    )
    record = {**summary, "fault_log": [f.to_dict() for f in faults]}
    (args.out / "soak.json").write_text(json.dumps(record, indent=2))
    print(render(summary))
    print(f"plot: {args.out / 'soak.png'}; details: {args.out / 'soak.json'}")
    print(json.dumps({k: v for k, v in summary.items() if k != "growth"}))
    return 0 if summary["passed"] else 1


def _drive(args, kinds, view, load, faults, rng, start) -> None:  # noqa: ANN001
    """Faults on schedule until the duration is over, then the wait for the last ones."""
    next_at = start + args.warmup
    while time.time() < start + args.duration:
        update_back(view, faults)
        if kinds and time.time() >= next_at:
            fault = _strike_next(kinds, view, faults, rng)
            if fault is not None:
                faults.append(fault)
                # NOTE: from now, not from the slot: a slot missed while nothing could be
                # struck is not made up by a burst of faults once things are back.
                next_at = time.time() + args.fault_every
                print(f"{time.time() - start:7.1f}s  fault {len(faults)}: {fault.kind} on "
                      f"{', '.join(fault.members)}", flush=True)  # fmt: skip
        time.sleep(1.0)
    deadline = time.time() + args.restore_timeout
    while any(f.back_at is None for f in faults) and time.time() < deadline:
        update_back(view, faults)
        time.sleep(1.0)
    time.sleep(min(30.0, args.request_timeout))  # NOTE: requests sent after the last restore


def _strike_next(kinds, view, faults, rng):  # noqa: ANN001, ANN202
    """The fault of the least-struck kind whose component is up, among the kinds at most
    ``AHEAD`` faults ahead of the least-struck one (workers take far longer to come back
    than the router: without the cap the router would take most of the faults)."""
    counts = {k: sum(f.kind == k for f in faults) for k in kinds}
    fewest = min(counts.values())
    order = sorted(
        (k for k in kinds if counts[k] < fewest + AHEAD), key=lambda k: (counts[k], rng.random())
    )
    return next((f for k in order if (f := strike(view, k, rng))), None)


def _write_requests(path: Path, outcomes, start: float) -> None:  # noqa: ANN001
    """Every request: when it was sent (s after the load began), how long it waited, its
    outcome (``ok`` or the cause) and the tokens it got."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["sent_s", "waited_s", "outcome", "output_tokens", "cached_tokens"])
        for o in outcomes:
            out.writerow(
                [f"{o.sent - start:.3f}", f"{o.waited_s:.3f}", o.cause or "ok",
                 len(o.output_ids), o.cached_tokens]
            )  # fmt: skip


def _serving_again(faults, outcomes) -> None:  # noqa: ANN001
    for fault in faults:
        ok = [o.ended for o in outcomes if o.ok and o.sent >= fault.at]
        fault.serving_at = min(ok, default=None)


def _detect_s(spec) -> dict[str, float]:  # noqa: ANN001
    """How long after a fault its component may still look up, by signal: a killed one
    until its registration is gone (the supervisor's and registrar's polls); a stopped one
    until the supervisor kills it (hang_timeout_s, then a probe and a poll)."""
    r = spec.restart
    return {"kill": 3.0, "stop": r.hang_timeout_s + r.probe_timeout_s + 2.0}


def _offloads(spec) -> tuple[str, str]:  # noqa: ANN001
    role = {g.role: g.engram_offload for g in spec.workers}
    return role["prefill"], role["decode"]


def _check_answers(spec, outcomes) -> list:  # noqa: ANN001
    """The completed answers the reference model (teacher-forced, the deployment's
    regime) does not agree with, token by token within the serving tests' tie."""
    from engram_testing.reference import agreement, load_reference
    from engram_testing.soak.report import regime_of

    reference = load_reference(Path(spec.model))
    regime = regime_of(*_offloads(spec))
    return [
        o
        for o in outcomes
        if o.ok and not agreement(reference, list(o.prompt), list(o.output_ids), regime).all_agree
    ]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run(lambda: soak(args), args)


if __name__ == "__main__":
    sys.exit(main())
