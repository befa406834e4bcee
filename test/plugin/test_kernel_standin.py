"""The ``sgl_kernel`` stand-in: used only where no GPU is present and the real package
cannot load; its plain-torch ops exist as ``torch.ops.sgl_kernel.*`` (their maths is
checked in ``test_standin_*_ops.py``) and every other op raises an error naming the op.
Each case runs in a fresh interpreter, as SGLang's processes do."""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sglang_engram.integration import kernel_standin
from sglang_engram.protocol.runtime import get_runtime

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", kernel_standin.ENV_VAR)}
    base["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "python"), str(ROOT / "sgl-kernel")]
    )
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _op_name() -> str:
    return "op_" + "".join(random.choices(string.ascii_lowercase, k=8))


def test_every_op_of_the_standin_raises_naming_itself():
    op, sub = _op_name(), _op_name()
    out = _run(
        f"""
        import sgl_kernel
        from sgl_kernel.{sub} import {op} as nested
        from sgl_kernel import {op}
        assert sgl_kernel.STANDIN
        for fn, name in ((sgl_kernel.{op}, "sgl_kernel.{op}"), (nested, "sgl_kernel.{sub}.{op}")):
            try:
                fn(1, x=2)
            except RuntimeError as e:
                assert name in str(e) and "stand-in" in str(e) and "why we test" in str(e), e
            else:
                raise SystemExit("no error")
        print("ok")
        """,
        env={
            "PYTHONPATH": os.pathsep.join([str(kernel_standin.STANDIN_DIR), str(ROOT / "python")]),
            kernel_standin.ENV_VAR: "why we test",
        },
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_the_standin_ops_exist_under_torch_ops_and_sgl_kernel_mamba():
    """What SGLang binds at import (``torch.ops.sgl_kernel.<op>``, keyword calls,
    ``from sgl_kernel.mamba import ...``) reaches the stand-in ops; a name that is not one
    of them still raises, naming itself."""
    out = _run(
        """
        import torch, sgl_kernel
        from sgl_kernel.mamba import causal_conv1d_fn_cpu, causal_conv1d_update_cpu, chunk_gated_delta_rule_cpu
        from sgl_kernel.mamba import causal_conv1d_fwd
        from sglang_engram.integration.kernel_standin.ops import STANDIN_OPS
        assert set(sgl_kernel.STANDIN_OPS) == set(STANDIN_OPS)
        assert all(hasattr(torch.ops.sgl_kernel, name) for name in STANDIN_OPS)
        x = torch.randn(3, 8)
        torch.ops.sgl_kernel.fused_sigmoid_mul_cpu(x=x, gate=torch.zeros(3, 8))
        pool = torch.zeros(2, 2, 4, 4)
        out = torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu(
            A_log=torch.zeros(2), dt_bias=torch.zeros(2), q=torch.randn(1, 1, 1, 4),
            k=torch.randn(1, 1, 1, 4), v=torch.randn(1, 1, 2, 4), a=torch.randn(1, 2),
            b=torch.randn(1, 2), initial_state_source=pool,
            initial_state_indices=torch.tensor([1]), cu_seqlens=torch.tensor([0, 1]),
            use_qk_l2norm_in_kernel=True, softplus_beta=1.0, softplus_threshold=20.0)
        assert out.shape == (1, 1, 2, 4) and pool[1].any() and not pool[0].any()
        states = torch.zeros(2, 6, 3)
        y = causal_conv1d_fn_cpu(torch.randn(6, 5), torch.randn(6, 4), None, activation="silu",
            conv_states=states, has_initial_state=torch.tensor([False]),
            cache_indices=torch.tensor([1]), query_start_loc=torch.tensor([0, 5]), seq_lens_cpu=[5])
        assert y.shape == (6, 5) and states[1].any()
        try:
            causal_conv1d_fwd(1)
        except RuntimeError as e:
            assert "sgl_kernel.mamba.causal_conv1d_fwd" in str(e)
        else:
            raise SystemExit("no error")
        print("ok")
        """,
        env={
            "PYTHONPATH": os.pathsep.join([str(kernel_standin.STANDIN_DIR), str(ROOT / "python")]),
            kernel_standin.ENV_VAR: "why we test",
        },
    )
    assert out.stdout.strip().splitlines()[-1:] == ["ok"], out.stderr


@pytest.mark.skipif(kernel_standin.gpu_present(), reason="the stand-in is never used with a GPU")
def test_without_a_gpu_the_standin_reaches_this_process_and_its_children():
    out = _run(
        """
        import json, os, subprocess, sys
        from sglang_engram.integration import kernel_standin
        from sglang_engram.protocol.runtime import get_runtime
        status = kernel_standin.install_if_needed(get_runtime())
        import sgl_kernel
        child = subprocess.run(
            [sys.executable, "-c", "import sgl_kernel; print(getattr(sgl_kernel, 'STANDIN', False))"],
            capture_output=True, text=True, check=True,
        )
        print(json.dumps([status.standin, status.detail, sgl_kernel.STANDIN, child.stdout.strip()]))
        """
    )
    assert out.returncode == 0, out.stderr
    standin, detail, here, child = json.loads(out.stdout.strip().splitlines()[-1])
    assert standin and here and child == "True"
    # the reason names what failed (the CUDA wheel needs libcuda), and it is logged
    assert "cannot load" in detail
    assert "sgl_kernel is a STAND-IN here" in out.stderr


def test_a_real_sgl_kernel_that_loads_is_left_alone(tmp_path):
    real = tmp_path / "sgl_kernel"
    real.mkdir()
    marker = _op_name()
    (real / "__init__.py").write_text(f"MARKER = {marker!r}\n")
    out = _run(
        """
        from sglang_engram.integration import kernel_standin
        from sglang_engram.protocol.runtime import get_runtime
        status = kernel_standin.install_if_needed(get_runtime())
        import sgl_kernel
        print(status.standin, getattr(sgl_kernel, "MARKER", None), hasattr(sgl_kernel, "STANDIN"))
        """,
        env={"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "python"), str(ROOT)])},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", marker, "False"]


def test_the_plugin_reports_which_sgl_kernel_it_found():
    from sglang_engram.doctor.report import collect, render

    report = collect(apply_hooks=False)
    status = kernel_standin.status(get_runtime())
    assert report["sgl_kernel"]["standin"] is status.standin
    assert status.describe() in render(report)
    if status.standin:
        assert "STAND-IN" in status.describe()
        assert "chunk_gated_delta_rule_cpu" in status.describe()


@pytest.mark.skipif(kernel_standin.gpu_present(), reason="the stand-in is never used with a GPU")
def test_on_the_cpu_engine_upstreams_triton_calls_run_the_torch_standins():
    """On a CPU without AMX upstream takes Triton kernels for the GDN output's gated norm
    and a Qwen MoE block's shared expert gate; with the plugin's hooks they give
    norm(x) * weight * silu(z) and x + sigmoid(h . w) * shared on the CPU engine."""
    out = _run(
        """
        import warnings; warnings.simplefilter("ignore")
        import torch
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang.kernels.ops.attention.fla.layernorm_gated import RMSNorm
        from sglang.srt.models import qwen2_moe
        norm = RMSNorm(16, eps=1e-6, dtype=torch.bfloat16)
        norm.weight.data = torch.rand(16, dtype=torch.bfloat16) + 0.5
        x, z = torch.randn(5, 16, dtype=torch.bfloat16), torch.randn(5, 16, dtype=torch.bfloat16)
        got = norm(x, z).double()
        xd, zd = x.double(), z.double()
        want = xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * norm.weight.double() * zd * torch.sigmoid(zd)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        h, w = torch.randn(3, 16, dtype=torch.bfloat16), torch.randn(16, dtype=torch.bfloat16) / 4
        shared, final = torch.randn(3, 16, dtype=torch.bfloat16), torch.randn(3, 16, dtype=torch.bfloat16)
        want = final.double() + torch.sigmoid(h.double() @ w.double())[:, None] * shared.double()
        qwen2_moe.fused_gate_sigmoid_mul_add(h, w, shared, final)
        torch.testing.assert_close(final.double(), want, rtol=2e-2, atol=2e-2)
        print("ok")
        """,
        env={"SGLANG_USE_CPU_ENGINE": "1"},
    )
    assert out.stdout.strip().splitlines()[-1:] == ["ok"], out.stderr[-3000:]
