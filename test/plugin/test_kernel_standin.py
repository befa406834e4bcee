"""The ``sgl_kernel`` stand-in: used only where no GPU is present and the real package
cannot load; every op in it raises an error naming the op. Each case runs in a fresh
interpreter, as SGLang's processes do."""

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
            "PYTHONPATH": str(kernel_standin.STANDIN_DIR),
            kernel_standin.ENV_VAR: "why we test",
        },
    )
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.skipif(kernel_standin.gpu_present(), reason="the stand-in is never used with a GPU")
def test_without_a_gpu_the_standin_reaches_this_process_and_its_children():
    out = _run(
        """
        import json, os, subprocess, sys
        from sglang_engram.integration import kernel_standin
        status = kernel_standin.install_if_needed()
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
        status = kernel_standin.install_if_needed()
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
    status = kernel_standin.status()
    assert report["sgl_kernel"]["standin"] is status.standin
    assert status.describe() in render(report)
    if status.standin:
        assert "STAND-IN" in status.describe()
