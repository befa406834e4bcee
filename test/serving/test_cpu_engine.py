"""``--device cpu`` needs SGLang's CPU engine: without it the launcher stops at once with
one line naming the variable (SGLang alone would fail deep in a layer's constructor)."""

from __future__ import annotations

import os
import subprocess
import sys

from sglang_engram.integration.cpu_serving import CPU_ENGINE_VAR


def test_device_cpu_without_the_cpu_engine_is_one_line(trained_tiny_model):
    model = trained_tiny_model
    env = {k: v for k, v in os.environ.items() if k != CPU_ENGINE_VAR}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(model),
            "--device",
            "cpu",
            "--port",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("sglang-engram: error: --device cpu needs SGLang's CPU engine")
    assert f"{CPU_ENGINE_VAR}=1" in last
    assert "Traceback" not in out.stderr
