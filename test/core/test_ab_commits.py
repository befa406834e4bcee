"""``benchmark/ab_commits.py``: a script run from each commit's own worktree, the runs
interleaved, every figure of its last JSON line compared."""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "benchmark" / "ab_commits.py"

# what each run reports: which checkout its `engram` came from, a figure that differs
# from run to run, and the run's place in the sequence the runs shared
SCRIPT = """
import json, os, sys
from pathlib import Path
import engram
log = Path(sys.argv[1])
order = len(log.read_text().splitlines()) if log.exists() else 0
with log.open("a") as f:
    f.write(os.getcwd() + "\\n")
own = Path(engram.__file__).resolve().is_relative_to(Path.cwd().resolve())
print("noise before the JSON")
print(json.dumps({"own_checkout": int(own), "order": order, "fixed": {"a": [3, 4]}}))
"""


def _tool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_each_commit_runs_its_own_code_in_turn_and_every_figure_is_compared(tmp_path):
    script, log = tmp_path / "figures.py", tmp_path / "runs.log"
    script.write_text(SCRIPT)
    repeats = random.randint(2, 3)
    work = tmp_path / "trees"
    try:
        done = _tool(
            "--old", "HEAD", "--new", "HEAD", "--repeats", str(repeats), "--all",
            "--work", str(work), "--", str(script), str(log), cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.splitlines()[-1])
        figures = result["figures"]
        # each run imported the engram of the worktree it ran in
        assert figures["own_checkout"] == {
            "old": 1.0, "new": 1.0, "ratio": 1.0, "old_spread": 0.0, "new_spread": 0.0
        }  # fmt: skip
        assert figures["fixed.a.1"]["new"] == 4.0
        # interleaved, each side first in turn: old took places 0, 3, 4, 7.., new 1, 2, 5..
        old_places = [2 * r + r % 2 for r in range(repeats)]
        new_places = [2 * r + 1 - r % 2 for r in range(repeats)]
        assert figures["order"]["old"] == statistics.median(old_places)
        assert figures["order"]["new"] == statistics.median(new_places)
        runs = log.read_text().splitlines()
        assert len(runs) == 2 * repeats and len(set(runs)) == 1  # HEAD twice: one tree
        assert Path(runs[0]).parent == work
        # without --all, figures equal in both are left out
        again = _tool(
            "--old", "HEAD", "--new", "HEAD", "--repeats", "1", "--work", str(work),
            "--", str(script), str(log), cwd=tmp_path,
        )  # fmt: skip
        assert json.loads(again.stdout.splitlines()[-1])["figures"].keys() == {"order"}
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=False)
        for tree in work.glob("*"):
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)])


def test_a_bad_commit_or_a_failing_script_is_one_line(tmp_path):
    bad = _tool("--old", "no-such-rev", "--new", "HEAD", "--", "x.py", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip() == f"error: --old/--new: 'no-such-rev' is no commit of {REPO}"
    failing = tmp_path / "failing.py"
    failing.write_text("import sys\nsys.exit('the table is gone')\n")
    work = tmp_path / "trees"
    try:
        done = _tool("--old", "HEAD", "--new", "HEAD", "--work", str(work), "--",
                     str(failing), cwd=tmp_path)  # fmt: skip
        assert done.returncode == 1
        assert done.stderr.strip() == "error: old run 1: exit 1: the table is gone"
    finally:
        for tree in work.glob("*"):
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)])
