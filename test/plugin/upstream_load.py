"""What the upstream-load scripts share (``qwen4_upstream_load``, ``dsv41_upstream_load``):
a one-rank CPU-engine SGLang context in which a model is built as a scheduler builds it,
and, on the test side, running such a script in a fresh interpreter for its JSON."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def script_env() -> dict[str, str]:
    """This checkout first on the path, SGLang's CPU engine on (read at import)."""
    path = os.pathsep.join([str(ROOT), str(ROOT / "python"), str(ROOT / "sgl-kernel")])
    return {**os.environ, "PYTHONPATH": path, "SGLANG_USE_CPU_ENGINE": "1"}


def run_script(module: str, model: Path) -> dict[str, Any]:
    """``python -m MODULE MODEL`` in a fresh interpreter: its ``RESULT`` JSON."""
    out = subprocess.run(
        [sys.executable, "-m", module, str(model)],
        env=script_env(), cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def one_rank(model_dir: str) -> Iterator[Any]:
    """A scheduler's context for ``model_dir`` on the CPU engine (``ModelConfig`` from the
    server arguments, the CPU config adjustments, a one-rank gloo group); yields the
    model config. Call after SGLang's ``load_plugins``."""
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.configs.update_config import adjust_config_with_unaligned_cpu_tp
    from sglang.srt.distributed.parallel_state import (
        init_distributed_environment,
        initialize_model_parallel,
    )
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=model_dir, device="cpu")
    context = create_context(args, role="scheduler", ranks=SpawnRanks(0, None, 0))
    with use_context(context):
        config = adjust_config_with_unaligned_cpu_tp(
            ModelConfig.from_server_args(args), LoadConfig(), 1
        )
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
        )  # fmt: skip
        initialize_model_parallel()
        initialize_dp_attention(server_args=args)
        yield config
