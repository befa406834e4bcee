"""Serving on SGLang's CPU engine (a machine without a GPU).

Stock SGLang 0.5.23 serves on the CPU with ``SGLANG_USE_CPU_ENGINE=1``: it then picks
``--device cpu``, the ``torch_native`` attention backend on CPUs without AMX, and no
CUDA graphs. Its imports still need ``sgl_kernel``, which :mod:`kernel_standin` provides
where the real one cannot load. This module checks the flags that must agree with that
engine before anything starts.
"""

from __future__ import annotations

import os
from typing import Any

CPU_ENGINE_VAR = "SGLANG_USE_CPU_ENGINE"


def cpu_engine_on() -> bool:
    return os.environ.get(CPU_ENGINE_VAR, "0") == "1"


def check_cpu_engine(server_args: Any) -> None:
    """``--device cpu`` runs only on SGLang's CPU engine, which an environment variable
    selects before any argument is parsed: refuse, in one line, to start without it."""
    if getattr(server_args, "device", None) == "cpu" and not cpu_engine_on():
        raise SystemExit(
            f"sglang-engram: error: --device cpu needs SGLang's CPU engine, which "
            f"{CPU_ENGINE_VAR}=1 selects; run {CPU_ENGINE_VAR}=1 python -m "
            "sglang.launch_server --device cpu ..."
        )
