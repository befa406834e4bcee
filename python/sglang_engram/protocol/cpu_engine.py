"""Whether this process serves on SGLang's CPU engine, which an environment variable
selects before any argument is parsed (SGLang then runs ``--device cpu``)."""

from __future__ import annotations

import os

CPU_ENGINE_VAR = "SGLANG_USE_CPU_ENGINE"


def cpu_engine_on() -> bool:
    return os.environ.get(CPU_ENGINE_VAR, "0") == "1"
