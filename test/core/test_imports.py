"""The core library builds on torch (and engram_kernels on a GPU), never on SGLang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_every_engram_module_loads_no_sglang() -> None:
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import engram\n"
        "names = [m.name for m in pkgutil.walk_packages(engram.__path__, 'engram.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps([len(names), sorted(n for n in sys.modules\n"
        "    if n.split('.')[0] in ('sglang', 'sglang_engram'))]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "sgl-kernel")])}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    count, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert count > 20  # every module was imported, the SSD tier and the tiny model included
    assert loaded == []
