"""Run a command as if this machine's disk served fewer random reads: a stand-in for a
slower disk (a disk-bound day), made with the kernel's block-I/O throttle.

Puts the command (and every process it starts) in a cgroup whose reads from the disk
holding ``--path`` are limited to ``--read-iops`` per second (cgroup v1
``blkio.throttle.read_iops_device``, or v2 ``io.max`` ``riops``), then runs it and
exits with its code. Reads past the limit wait in the kernel, as they would on a disk
that serves no more; ``O_DIRECT`` reads (``--engram-ssd-read direct``) are all
counted. Needs root and a mounted blkio (v1) or io (v2) controller; ``disk_probe.py``
under it shows the limit in force.

    sudo python benchmark/slow_disk.py --read-iops 15000 --path models -- \\
        python benchmark/bench_serving_tiers.py --table-gib 4 --concurrencies 8,32
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from pathlib import Path

V1 = Path("/sys/fs/cgroup/blkio")
V2 = Path("/sys/fs/cgroup")


def disk_of(path: Path) -> str:
    """``major:minor`` of the whole disk holding ``path`` (a partition's parent)."""
    dev = os.stat(path).st_dev
    node = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not node.exists():
        raise ValueError(f"{path} is not on a block device the kernel throttles")
    if (node / "partition").exists():
        node = node.resolve().parent
    return (node / "dev").read_text().strip()


def throttled_group(name: str, disk: str, iops: int) -> Path:
    """A cgroup named ``name`` whose reads from ``disk`` are limited to ``iops`` per second."""
    if (V1 / "blkio.throttle.read_iops_device").exists():
        group = V1 / name
        group.mkdir(exist_ok=True)
        (group / "blkio.throttle.read_iops_device").write_text(f"{disk} {iops}")
        return group
    if "io" in (V2 / "cgroup.controllers").read_text().split():
        group = V2 / name
        group.mkdir(exist_ok=True)
        (group / "io.max").write_text(f"{disk} riops={iops}")
        return group
    raise ValueError("neither cgroup v1 blkio nor v2 io is mounted under /sys/fs/cgroup")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-iops", type=int, required=True, help="random reads/s allowed")
    parser.add_argument("--path", type=Path, default=Path("."), help="a path on the disk")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    problem = (
        "give the command to run after --" if not command
        else f"--read-iops must be at least 1, not {args.read_iops}" if args.read_iops < 1
        else f"--path {args.path} does not exist" if not args.path.exists()
        else None
    )  # fmt: skip
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        disk = disk_of(args.path)
        group = throttled_group(f"engram-slow-disk-{os.getpid()}", disk, args.read_iops)
    except PermissionError as err:
        print(f"error: setting up the throttle needs root ({err.filename})", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"slow_disk: reads from disk {disk} limited to {args.read_iops}/s", flush=True)
    proc = subprocess.Popen(
        command, preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid()))
    )
    try:
        return proc.wait()
    finally:
        proc.wait()
        with contextlib.suppress(OSError):  # NOTE: a process of the command outlived it
            group.rmdir()


if __name__ == "__main__":
    sys.exit(main())
