"""A subprocess environment in which some top-level modules cannot be imported: an import
blocker on ``sys.meta_path``, installed by a ``sitecustomize`` module put first on its
PYTHONPATH. It hides an extra's packages without uninstalling them or touching our code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BLOCKER = """
import sys

class _ImportBlocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _ImportBlocker())
"""


def blocked_env(tmp_path: Path, blocked: tuple[str, ...]) -> dict[str, str]:
    """The environment of a subprocess that cannot import ``blocked``; checks it cannot."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(blocked)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    for module in blocked:
        probe = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, module
    return env
