"""Without the `cluster` extra (Ray, sglang-router, psutil), the launcher says how to
install it.

The packages are hidden from a real subprocess by an import blocker on its PYTHONPATH
(a sitecustomize module), not by touching our code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test.import_blocker import blocked_env

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pd-cluster.yaml"


@pytest.mark.parametrize(
    ("blocked", "needs"),
    [
        (("ray",), "Ray"),
        (("sglang_router",), "sglang-router"),
        (("ray", "sglang_router"), "Ray and sglang-router"),
        (("psutil",), "psutil"),
        (("ray", "sglang_router", "psutil"), "Ray, sglang-router and psutil"),
    ],
)
def test_missing_extra_is_one_line_with_the_install_command(tmp_path, blocked, needs):
    env = blocked_env(tmp_path, blocked)  # the blocker works
    for args in (["plan", str(EXAMPLE), "--num-gpus", "2"], ["status", "--name", "x"]):
        out = subprocess.run(
            [sys.executable, "-m", "sglang_engram.cluster", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 1 and out.stdout == ""
        assert out.stderr == (
            f"error: the cluster launcher needs {needs}: pip install 'sglang-engram[cluster]'\n"
        )
