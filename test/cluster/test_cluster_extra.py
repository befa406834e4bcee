"""Without the `cluster` extra (Ray, sglang-router), the launcher says how to install it.

The packages are hidden from a real subprocess by an import blocker on its PYTHONPATH
(a sitecustomize module), not by touching our code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pd-cluster.yaml"
BLOCKER = """
import sys

class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Blocker())
"""


@pytest.mark.parametrize(
    ("blocked", "needs"),
    [
        (("ray",), "Ray"),
        (("sglang_router",), "sglang-router"),
        (("ray", "sglang_router"), "Ray and sglang-router"),
    ],
)
def test_missing_extra_is_one_line_with_the_install_command(tmp_path, blocked, needs):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(blocked)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    probe = subprocess.run(
        [sys.executable, "-c", f"import {blocked[0]}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr  # the blocker works
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
