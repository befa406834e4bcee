"""engram_kernels is a leaf: it imports torch, Triton and the standard library only."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sgl-kernel" / "engram_kernels"
ALLOWED = {"torch", "triton", "engram_kernels", *sys.stdlib_module_names}


def test_sources_import_only_torch_triton_and_the_stdlib() -> None:
    found = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                if root not in ALLOWED:
                    found.setdefault(path.name, []).append(root)
    assert found == {}


def test_importing_every_module_loads_neither_engram_nor_sglang() -> None:
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import engram_kernels\n"
        "for m in pkgutil.iter_modules(engram_kernels.__path__):\n"
        "    importlib.import_module('engram_kernels.' + m.name)\n"
        "print(json.dumps(sorted(n for n in sys.modules\n"
        "    if n.split('.')[0] in ('engram', 'sglang', 'sglang_engram'))))\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_fp8_block_agrees_with_the_core_library() -> None:
    from engram_kernels.dequant import FP8_BLOCK

    from engram.fp8 import FP8_BLOCK as CORE_BLOCK

    assert FP8_BLOCK == CORE_BLOCK
