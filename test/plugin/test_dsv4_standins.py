"""The plain-torch stand-ins for DeepSeek-V4's CUDA-only ops on SGLang's CPU engine,
against upstream SGLang's own references for each (``dsv4_standin_check.py``, in a fresh
interpreter with Triton's interpreter on, so that upstream's Triton kernels run as
references): the K quantiser, page store and reader, the K norm+RoPE, RoPE, the mHC
Sinkhorn split and stream combine, the sparse attention against a per-query softmax over
upstream's dequantised keys, and every sliding-window case of SGLang's own
DeepSeek-V4 attention test kit (upstream's backend and pool with the stand-ins, against
the kit's pure-torch reference). Also: the hooks route to them only on the CPU engine,
and ``doctor`` names them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sglang_engram.integration.kernel_standin.dsv4 import DSV4_STANDINS, routes
from sglang_engram.protocol.cpu_engine import CPU_ENGINE_VAR

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STANDIN_CHECKS = (
    "k_quantize_picks_upstreams_exponents_and_rounds_to_nearest",
    "k_store_equals_upstream_torch_and_triton",
    "k_load_equals_upstream_dequant_reference",
    "k_norm_rope_equals_upstream_triton",
    "rope_equals_upstream_triton",
    "sinkhorn_equals_upstream_references",
    "combine_equals_upstream_triton",
    "sparse_attention_equals_a_per_query_softmax",
)
# NOTE: SGLang 0.5.23's kit (make_dsv4_cases): its compress_ratio=0 slice
KIT_SWA_CASES = 13


@pytest.fixture(scope="module")
def checked() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "python"), str(ROOT / "sgl-kernel")])
    env = {**os.environ, "PYTHONPATH": path, CPU_ENGINE_VAR: "1", "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "test.plugin.dsv4_standin_check"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


@pytest.mark.parametrize("name", STANDIN_CHECKS)
def test_each_standin_matches_upstreams_reference(checked, name):
    assert checked[name] == "ok", checked[name]


def test_upstreams_attention_kit_passes_every_sliding_window_case(checked):
    kit = {name: result for name, result in checked.items() if name.startswith("kit:")}
    assert len(kit) == KIT_SWA_CASES, sorted(kit)
    assert {name: r for name, r in kit.items() if r != "ok"} == {}
    assert set(checked) == set(STANDIN_CHECKS) | set(kit)


def test_the_hooks_run_upstreams_kernels_off_the_cpu_engine(monkeypatch):
    """Off the CPU engine each route calls upstream's kernel, untouched; on it the
    stand-in (a RoPE rotates the tail in place)."""
    calls = []

    def upstream(*args):
        calls.append(args)

    q = torch.randn(3, 2, 512).to(torch.bfloat16)
    freqs = torch.polar(torch.ones(16, 32), torch.rand(16, 32))
    positions = torch.tensor([0, 5, 9])
    monkeypatch.delenv(CPU_ENGINE_VAR, raising=False)
    before = q.clone()
    routes.rope_inplace(upstream, q, None, freqs, positions, True)
    assert len(calls) == 1 and calls[0][4] is True and torch.equal(q, before)
    assert routes.no_flashmla_metadata(lambda: "upstream's schedule") == "upstream's schedule"
    monkeypatch.setenv(CPU_ENGINE_VAR, "1")
    routes.rope_inplace(upstream, q[..., -64:], None, freqs, positions, False)
    assert len(calls) == 1 and not torch.equal(q, before)
    assert torch.equal(q[..., :-64], before[..., :-64])
    assert routes.no_flashmla_metadata(lambda: "upstream's schedule") is None


def test_doctor_names_every_standin():
    from sglang_engram.doctor.report import collect, render

    report = collect(apply_hooks=False)
    assert report["sgl_kernel"]["dsv4_standins"] == list(DSV4_STANDINS)
    text = render(report)
    assert all(name in text for name in DSV4_STANDINS)
    assert "DeepSeek-V4 on SGLang's CPU engine: plain-torch STAND-INS" in text
