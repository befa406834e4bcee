"""``atomic_write``: whole files only, with the mode ``open()`` would give them."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

import pytest

from engram.files import atomic_write, nearest_existing


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_new_file_gets_the_umask_mode(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "report.md", "# report\n")
        with open(tmp_path / "plain.txt", "w") as f:  # what open() gives, for comparison
            f.write("x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "report.md") == 0o666 & ~umask == _mode(tmp_path / "plain.txt")
    assert (tmp_path / "report.md").read_text() == "# report\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    mode = random.choice([0o600, 0o640, 0o664])
    path.chmod(mode)
    data = os.urandom(random.randint(1, 4096))
    atomic_write(path, lambda f: f.write(data))
    assert _mode(path) == mode and path.read_bytes() == data


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    atomic_write(path, b"old")

    def fail(f) -> None:
        f.write(b"half")
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        atomic_write(path, fail)
    assert path.read_bytes() == b"old" and sorted(tmp_path.iterdir()) == [path]


def test_nearest_existing(tmp_path: Path) -> None:
    assert nearest_existing(tmp_path / "a" / "b" / "c") == tmp_path
    assert nearest_existing(tmp_path) == tmp_path
