"""``python -m sglang_engram.compare {sweep,report}``."""

from __future__ import annotations

import argparse
import sys

from engram.cli import Parser, RawDescriptionFormatter, number, run, say
from engram.cli_paths import directory, existing_file
from sglang_engram.extras import require_extra

_DESCRIPTION = """\
Comparison runs of Engram placements, deployments (one server, PD clusters) and GPUs.

  sweep SPEC.yaml --out DIR [--resume | --force-new]
      run every config x concurrency point of the spec through
      `python -m sglang.benchmark.serving`; one line per point in DIR/results.jsonl;
      --resume runs only the missing points, and only if DIR/spec.json records the
      same sweep (configs and concurrencies may be added)
  report RESULTS.jsonl... --out DIR [--costs FILE] [--at TOK_S_USER ...]
      merge results files (e.g. one per machine), group by sku/config, and write
      report.md, summary.json, tput_per_device.png (per GPU; per host for CPU points)
      and tokens_per_dollar.png (groups with a price; CPUs only from --costs)
"""


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m sglang_engram.compare",
        description=_DESCRIPTION,
        formatter_class=RawDescriptionFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="measure every point of a sweep spec")
    sweep.add_argument("spec", help="sweep spec (YAML); see examples/sweep-placements.yaml")
    sweep.add_argument("--out", required=True, type=directory, help="results directory")
    again = sweep.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="run only the points DIR/results.jsonl lacks (refused if DIR/spec.json records "
        "another sweep)",
    )
    again.add_argument(
        "--force-new",
        action="store_true",
        help="start over: move DIR's previous results aside (into DIR/previous-TIME/)",
    )
    report = sub.add_parser("report", help="frontiers, tokens per dollar and charts")
    report.add_argument("results", nargs="+", type=existing_file, help="results.jsonl files")
    report.add_argument("--out", required=True, type=directory, help="report directory")
    report.add_argument(
        "--costs",
        type=existing_file,
        help="YAML overriding the shipped $/GPU-hour (usd_per_gpu_hour) or pricing CPU hosts "
        "(usd_per_cpu_hour)",
    )
    report.add_argument("--note", help="a line printed on the charts and in report.md")
    report.add_argument(
        "--at",
        type=number(float, above=0),
        nargs="+",
        default=[125.0],
        metavar="TOK_S_USER",
        help="interactivities to read values at (default 125)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def body() -> int:
        require_extra("compare", "the comparison tool")
        return _sweep(args) if args.command == "sweep" else _report(args)

    return run(body, args)


def _sweep(args: argparse.Namespace) -> int:
    from sglang_engram.compare.results import ResultsError
    from sglang_engram.compare.resume import ResumeRefused
    from sglang_engram.compare.spec import SweepSpecError, load_sweep_spec
    from sglang_engram.compare.sweep import SweepError, run_sweep

    def body() -> int:
        spec = load_sweep_spec(args.spec)
        failures = run_sweep(spec, args.out, resume=args.resume, force_new=args.force_new, say=say)
        say(f"done: {args.out / 'results.jsonl'}" + (f" ({failures} failed)" if failures else ""))
        return 1 if failures else 0

    return run(
        body,
        args,
        usage=(SweepSpecError, SweepError, ResumeRefused, ResultsError),
        interrupted="interrupted: the benchmark and every server this sweep started are stopped",
    )


def _report(args: argparse.Namespace) -> int:
    from sglang_engram.compare.costs import CostError, load_costs
    from sglang_engram.compare.report import write_report
    from sglang_engram.compare.report_markdown import outside_notes
    from sglang_engram.compare.results import ResultsError

    def body() -> int:
        costs = load_costs(args.costs)
        summary = write_report(args.results, args.out, costs, args.at, note=args.note)
        groups = ", ".join(f"{n} ({g['points']})" for n, g in summary["groups"].items())
        print(f"report: {args.out / 'report.md'}; groups: {groups}")
        for x in args.at:
            if note := outside_notes(summary, x):
                print(f"note: {note}")
        return 0

    return run(body, args, usage=(CostError, ResultsError))


if __name__ == "__main__":
    sys.exit(main())
