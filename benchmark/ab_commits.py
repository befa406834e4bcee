"""One benchmark, two commits, side by side in one run: old against new.

    python benchmark/ab_commits.py --old REV --new REV [--repeats 3] -- SCRIPT [ARGS...]

Checks both commits out as detached worktrees under ``--work`` (kept for the next
run), then runs ``python SCRIPT ARGS`` from each in turn: old then new, then new then old,
and so on (repeats interleaved, so a machine that slows down part way slows both, and
each goes first as often as the other). Each run
imports its own commit's code: its worktree's ``engram``, ``sgl-kernel`` and ``python``
come first on ``PYTHONPATH``, ahead of the installed package; the interpreter and its
other packages are this one's. Relative paths in ``ARGS`` are taken from each worktree,
so give absolute ones for what both should share (a model directory, an SSD directory).
An absolute ``SCRIPT`` is the same benchmark code for both, measuring each commit's
library (a benchmark the old commit does not have yet).

Every number in a run's last line of JSON is a figure; the table gives each one's
median per commit, its spread over the runs ((max - min) / median: the noise to read a
ratio against) and new / old. Figures equal in both are left out unless ``--all``. The
last line is JSON: ``{"old": REV, "new": REV, "repeats": N, "figures": {name: {"old": x,
"new": y, "ratio": r, "old_spread": s, "new_spread": s}}}``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from engram.cli import Parser, number, run
from engram.errors import EngramInputError, EngramRunError

REPO = Path(__file__).resolve().parent.parent


def _worktree(rev: str, work: Path) -> tuple[str, Path]:
    """``rev`` as a full commit id, checked out (once) in its own worktree."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True, text=True,
    )  # fmt: skip
    if found.returncode != 0:
        raise EngramInputError(f"--old/--new: {rev!r} is no commit of {REPO}")
    commit = found.stdout.strip()
    tree = work / commit[:12]
    if not tree.exists():
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), commit],
            check=True,
        )
    return commit, tree


def _figures(value: Any, prefix: str = "") -> dict[str, float]:
    """Every number in a JSON value, by its dotted path (booleans are no figures)."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, int | float):
        return {prefix: float(value)}
    items = value.items() if isinstance(value, dict) else enumerate(value or ())
    if not isinstance(value, dict | list):
        return {}
    found: dict[str, float] = {}
    for key, item in items:
        found.update(_figures(item, f"{prefix}.{key}" if prefix else str(key)))
    return found


def _summary(values: list[float]) -> dict[str, float | None]:
    """The median of a figure's runs, and their spread: (max - min) / median, the noise
    a ratio of medians should be read against."""
    median = statistics.median(values)
    spread = (max(values) - min(values)) / abs(median) if median else None
    return {"median": median, "spread": spread}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _run_once(tree: Path, command: list[str], label: str) -> dict[str, float]:
    paths = [str(tree), str(tree / "sgl-kernel"), str(tree / "python")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [sys.executable, *command], cwd=tree, env=env, capture_output=True, text=True
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise EngramRunError(f"{label}: exit {done.returncode}: {tail[0]}")
    try:
        return _figures(json.loads(lines[-1]))
    except json.JSONDecodeError:
        raise EngramRunError(f"{label}: the last line of its output is no JSON") from None


def _parser() -> Parser:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the commit measured first")
    parser.add_argument("--new", required=True, help="the commit compared with it")
    parser.add_argument(
        "--repeats", type=number(int, at_least=1), default=3, help="runs per commit"
    )
    parser.add_argument("--all", action="store_true", help="also figures equal in both")
    parser.add_argument(
        "--work", type=Path, default=REPO / "out" / "ab_commits", help="the worktrees' folder"
    )
    parser.add_argument("command", nargs="+", help="SCRIPT [ARGS...] (after --)")
    return parser


def _compare(args: Any) -> int:
    args.work.mkdir(parents=True, exist_ok=True)
    sides = {"old": _worktree(args.old, args.work), "new": _worktree(args.new, args.work)}
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for repeat in range(args.repeats):
        for side in ("old", "new") if repeat % 2 == 0 else ("new", "old"):
            commit, tree = sides[side]
            print(f"run {repeat + 1}/{args.repeats} {side} {commit[:12]}", flush=True)
            runs[side].append(_run_once(tree, args.command, f"{side} run {repeat + 1}"))
    names = sorted(set.intersection(*(set(r) for r in runs["old"] + runs["new"])))
    figures = {}
    for name in names:
        old, new = (_summary([r[name] for r in runs[side]]) for side in ("old", "new"))
        if old == new and not args.all:
            continue
        ratio = new["median"] / old["median"] if old["median"] else None
        figures[name] = {"old": old["median"], "new": new["median"], "ratio": ratio,
                         "old_spread": old["spread"], "new_spread": new["spread"]}  # fmt: skip
    width = max((len(n) for n in figures), default=10)
    print(f"{'figure':<{width}}  {'old':>11} {'spread':>6}  {'new':>11} {'spread':>6}  new/old")
    for name, f in figures.items():
        ratio = "-" if f["ratio"] is None else f"{f['ratio']:.3f}"
        print(
            f"{name:<{width}}  {f['old']:>11.4g} {_pct(f['old_spread']):>6}  "
            f"{f['new']:>11.4g} {_pct(f['new_spread']):>6}  {ratio}"
        )
    print(json.dumps({"old": sides["old"][0], "new": sides["new"][0],
                      "repeats": args.repeats, "figures": figures}))  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run(lambda: _compare(args), args)


if __name__ == "__main__":
    sys.exit(main())
