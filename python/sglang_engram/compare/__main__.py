"""``python -m sglang_engram.compare {sweep,report}``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_DESCRIPTION = """\
Comparison runs of Engram placements, layouts and GPUs.

  sweep SPEC.yaml --out DIR [--resume]
      run every config x concurrency point of the spec through
      `python -m sglang.benchmark.serving`; one line per point in DIR/results.jsonl
  report RESULTS.jsonl... --out DIR [--costs FILE] [--at TOK_S_USER ...]
      merge results files (e.g. one per machine), group by sku/config, and write
      report.md, summary.json, tput_per_device.png (per GPU; per host for CPU points)
      and tokens_per_dollar.png (groups with a price; CPUs only from --costs)
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_engram.compare",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="measure every point of a sweep spec")
    sweep.add_argument("spec", help="sweep spec (YAML); see examples/sweep-placements.yaml")
    sweep.add_argument("--out", required=True, type=Path, help="results directory")
    sweep.add_argument(
        "--resume", action="store_true", help="skip the points DIR/results.jsonl already has"
    )
    report = sub.add_parser("report", help="frontiers, tokens per dollar and charts")
    report.add_argument("results", nargs="+", type=Path, help="results.jsonl files")
    report.add_argument("--out", required=True, type=Path, help="report directory")
    report.add_argument(
        "--costs",
        type=Path,
        help="YAML overriding the shipped $/GPU-hour (usd_per_gpu_hour) or pricing CPU hosts "
        "(usd_per_cpu_hour)",
    )
    report.add_argument("--note", help="a line printed on the charts and in report.md")
    report.add_argument(
        "--at",
        type=float,
        nargs="+",
        default=[125.0],
        metavar="TOK_S_USER",
        help="interactivities to read values at (default 125)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "sweep":
        return _sweep(args)
    return _report(args)


def _sweep(args: argparse.Namespace) -> int:
    from sglang_engram.compare.spec import SweepSpecError, load_sweep_spec
    from sglang_engram.compare.sweep import SweepError, run_sweep

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        spec = load_sweep_spec(args.spec)
        failures = run_sweep(spec, args.out, resume=args.resume, say=say)
    except (SweepSpecError, SweepError) as exc:
        say(f"error: {exc}")
        return 2
    except KeyboardInterrupt:
        say("interrupted: the benchmark and every server this sweep started are stopped")
        return 130
    say(f"done: {args.out / 'results.jsonl'}" + (f" ({failures} failed)" if failures else ""))
    return 1 if failures else 0


def _report(args: argparse.Namespace) -> int:
    from sglang_engram.compare.costs import CostError, load_costs
    from sglang_engram.compare.report import write_report

    try:
        costs = load_costs(args.costs)
        for path in args.results:
            if not path.is_file():
                raise ValueError(f"{path}: no such results file")
        summary = write_report(args.results, args.out, costs, args.at, note=args.note)
    except (CostError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    groups = ", ".join(f"{n} ({g['points']})" for n, g in summary["groups"].items())
    print(f"report: {args.out / 'report.md'}; groups: {groups}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
