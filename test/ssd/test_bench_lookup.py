"""``benchmark/bench_lookup.py`` end to end on a tiny table: every figure the issue-23
table quotes is in its last line of JSON, each a measured positive rate or ratio."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_tiny_run_reports_every_figure(tmp_path: Path) -> None:
    cmd = [
        sys.executable, str(REPO / "benchmark/bench_lookup.py"), "--table-gib", "0.02",
        "--dir", str(tmp_path), "--compare-checks", "--repeats", "2", "--cold-repeats", "1",
        "--step-rows", "384,3072", "--step-repeats", "3",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for batch in ("decode", "prefill"):
        for kind in ("dram", "ssd_warm", "ssd_warm_first", "ssd_cold", "naive_cold"):
            assert result[batch][kind] > 0, (batch, kind)
        assert result["unchecked"][batch]["ssd_cold"] > 0
    sizes = result["steps"]["sizes"]
    assert set(sizes) == {"384", "3072"}
    assert all(s["host_us_per_row"] > 0 and s["total_ms"] > 0 for s in sizes.values())
    assert 0 <= result["read_ahead_exposed_ratio"] <= 1
    assert result["cold_resident_fraction"] < 0.01  # cold runs really read from the disk
    assert list(tmp_path.iterdir()) == []  # the temporary table is gone


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--dir", "{missing}"], "is not a directory"),
        (["--table-gib", "-1"], "--table-gib must be positive"),
        (["--cold-repeats", "0"], "--cold-repeats must be at least 1"),
        (["--step-rows", "384,x"], "comma-separated row counts"),
        (["--step-rows", "384,40"], "each lookup is at least 48 rows"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    args = [a.format(missing=tmp_path / "gone") for a in args]
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmark/bench_lookup.py"), "--dir", str(tmp_path), *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].count("error") == 1
    assert list(tmp_path.iterdir()) == []  # nothing was built


def _steps(table_dir: Path, seed: int) -> dict:
    cmd = [
        sys.executable, str(REPO / "benchmark/lookup_steps.py"), "--table-gib", "0.02",
        "--dir", str(table_dir), "--step-rows", "384,3072", "--repeats", "3",
        "--seed", str(seed),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_decode_steps_alone_look_up_the_same_rows_for_the_same_seed(tmp_path: Path) -> None:
    seed = random.randint(0, 1 << 30)
    first, again, other = _steps(tmp_path, seed), _steps(tmp_path, seed), _steps(tmp_path, seed + 1)
    assert [p.name for p in tmp_path.iterdir()] == ["table"]  # built once, then reused
    # the RAM cache's hits follow the ids drawn: equal for one seed, not for another
    assert first["ram_cache_hit_ratio"] == again["ram_cache_hit_ratio"] > 0
    assert other["ram_cache_hit_ratio"] != first["ram_cache_hit_ratio"]
    assert set(first["sizes"]) == {"384", "3072"}
    assert all(s["host_us_per_row"] > 0 for s in first["sizes"].values())
