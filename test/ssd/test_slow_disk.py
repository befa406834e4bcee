"""``benchmark/slow_disk.py``, the stand-in for a slower disk: the command it runs sits in
a cgroup whose reads from the disk of ``--path`` are limited as asked, the group is gone
once the command ends, its exit code is the command's, and bad input is one line."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from test.ssd.helpers import REPO

SCRIPT = REPO / "benchmark" / "slow_disk.py"
V1 = Path("/sys/fs/cgroup/blkio/blkio.throttle.read_iops_device")

# NOTE: the command reports its blkio cgroup's read limits, then exits with a code of its own
_REPORT = """
import sys
group = next(line.split(":", 2)[2] for line in open("/proc/self/cgroup") if ":blkio:" in line).strip()
print(group)
print(open(f"/sys/fs/cgroup/blkio{group}/blkio.throttle.read_iops_device").read().strip())
sys.exit(int(sys.argv[1]))
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(
    os.geteuid() != 0 or not V1.exists(), reason="needs root and the cgroup v1 blkio throttle"
)
def test_the_command_runs_throttled_and_its_group_goes_with_it(tmp_path) -> None:
    iops, code = random.randint(100, 50_000), random.randint(0, 9)
    done = _run("--read-iops", str(iops), "--path", str(tmp_path), "--", sys.executable, "-c",
                _REPORT, str(code))  # fmt: skip
    assert done.returncode == code, done.stderr
    said, group, limit = done.stdout.splitlines()
    dev = os.stat(tmp_path).st_dev
    assert group.startswith("/engram-slow-disk-")
    assert limit.split()[1] == str(iops) and said.endswith(f"limited to {iops}/s")
    disk = limit.split()[0]
    # the disk of --path (its partition's parent disk when it is on a partition)
    assert (
        disk == f"{os.major(dev)}:{os.minor(dev)}"
        or Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/partition").exists()
    )
    assert not Path(f"/sys/fs/cgroup/blkio{group}").exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (["--read-iops", "1000"], "give the command to run after --"),
        (["--read-iops", "0", "--", "true"], "--read-iops must be at least 1, not 0"),
        (["--read-iops", "9", "--path", "/no/such/dir", "--", "true"], "--path /no/such/dir"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says) -> None:
    done = _run(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
