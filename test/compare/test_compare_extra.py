"""Without the `compare` extra (scipy, matplotlib, psutil), `python -m sglang_engram.compare`
says how to install it; and each extra is what its commands import, nothing of it the plugin.

The packages are hidden from a real subprocess by an import blocker on its PYTHONPATH
(a sitecustomize module), not by uninstalling them or touching our code.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_engram.extras import EXTRAS

from test.import_blocker import blocked_env

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "examples" / "sweep-cpu.yaml"
# NOTE: what only the extras' commands import: cluster/, compare/, and the helpers only
# they import (server_process.py; extras.py imports nothing of an extra).
EXTRA_ONLY = ("python/sglang_engram/cluster/", "python/sglang_engram/compare/")
SHARED_BY_EXTRAS = "python/sglang_engram/server_process.py"


@pytest.mark.parametrize(
    ("blocked", "needs"),
    [
        (("scipy",), "scipy"),
        (("matplotlib",), "matplotlib"),
        (("psutil",), "psutil"),
        (("scipy", "matplotlib"), "scipy and matplotlib"),
        (("scipy", "matplotlib", "psutil"), "scipy, matplotlib and psutil"),
    ],
)
def test_missing_extra_is_one_line_with_the_install_command(tmp_path, blocked, needs):
    env = blocked_env(tmp_path, blocked)  # the blocker works
    results = tmp_path / "results.jsonl"
    results.write_text("")
    for args in (
        ["sweep", str(SWEEP), "--out", str(tmp_path / "run")],
        ["report", str(results), "--out", str(tmp_path / "report")],
    ):
        out = subprocess.run(
            [sys.executable, "-m", "sglang_engram.compare", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 1 and out.stdout == "", args
        assert out.stderr == (
            f"error: the comparison tool needs {needs}: pip install 'sglang-engram[compare]'\n"
        ), args
    assert not (tmp_path / "run" / "results.jsonl").exists()  # nothing was started


def _module_level_imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports outside any function or class."""
    roots = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def _requirements(entries: list[str]) -> set[str]:
    """Distribution names of pyproject requirement strings, normalised."""
    return {re.split(r"[\[=<>~! ;]", e, maxsplit=1)[0].lower().replace("_", "-") for e in entries}


def test_the_extras_hold_what_only_their_commands_import():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirements(project["dependencies"])
    optional = {
        name: _requirements(deps) for name, deps in project["optional-dependencies"].items()
    }
    extra_modules = {m for modules in EXTRAS.values() for m in modules}
    for extra, modules in EXTRAS.items():
        # each module of the extra comes with a distribution of that extra, none of the core
        dists = {package.lower() for package in modules.values()}
        assert dists <= optional[extra], extra
        assert not dists & core, extra
    assert "filelock" not in core | set().union(*optional.values())  # nothing imports it
    # the plugin and the core libraries import none of it at module level
    found = {}
    for top in ("engram", "sgl-kernel", "python/sglang_engram"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(EXTRA_ONLY) or rel == SHARED_BY_EXTRAS:
                continue
            if hit := _module_level_imports(path) & extra_modules:
                found[rel] = sorted(hit)
    assert found == {}
    # and the module shared by cluster and compare is imported by nothing else
    users = {
        path.relative_to(ROOT).as_posix()
        for top in ("engram", "sgl-kernel", "python/sglang_engram")
        for path in (ROOT / top).rglob("*.py")
        if "sglang_engram.server_process" in path.read_text()
    }
    assert users and all(u.startswith(EXTRA_ONLY) for u in users), users
