"""On a GPU: one prefill (Engram hbm) and one decode (Engram dram) SGLang worker sharing
one GPU (gpus_per_worker 0.5), a real KV transfer backend and the real router.

The CPU cluster tests (test_cluster_ray.py) run the same launcher with ``device: cpu``;
what only a GPU shows is Ray sharing one GPU between two workers, the KV moving out of
and into GPU memory, and the decode side's Engram tables in pinned host memory read over
UVA. The decode worker keeps Engram, so its tokens must agree with the reference model
in the ``both`` regime, teacher-forced on the served tokens.
"""

from __future__ import annotations

import importlib.util
import random
import signal

import pytest
from engram_testing.client import generate_ids
from engram_testing.reference import agreement_all, load_reference, random_prompts
from engram_testing.server import build_tiny_model

from test.cluster.util import free_block, start_up

pytestmark = pytest.mark.gpu


def _transfer_backend() -> str:
    # NOTE: nixl first (over UCX it works without an RDMA NIC); mooncake over TCP.
    for module, backend in (("nixl", "nixl"), ("mooncake", "mooncake_tcp")):
        if importlib.util.find_spec(module) is not None:
            return backend
    pytest.skip("no KV transfer backend installed (pip install nixl or mooncake-transfer-engine)")


def test_pd_cluster_on_one_shared_gpu_agrees_with_the_reference(tmp_path):
    backend = _transfer_backend()
    model = build_tiny_model(tmp_path / "model")
    base = free_block(5)
    spec = tmp_path / "gpu.yaml"
    spec.write_text(
        f"""name: gpu{random.randint(0, 10**6)}
model: {model}
transfer_backend: {backend}
router: {{port: {base}, prometheus_port: {base + 1}}}
base_port: {base + 2}
bootstrap_base_port: {base + 4}
workers:
  - {{role: prefill, gpus_per_worker: 0.5, engram_offload: hbm,
      extra_args: [--mem-fraction-static, "0.3"]}}
  - {{role: decode, gpus_per_worker: 0.5, engram_offload: dram,
      extra_args: [--mem-fraction-static, "0.3"]}}
"""
    )
    up = start_up(spec, tmp_path / "home")
    try:
        seen = []
        for line in up.stdout:
            seen.append(line)
            if line.startswith("ready: "):
                break
        else:
            pytest.fail(
                f"up exited with {up.wait()} before the cluster was ready:\n{''.join(seen)}"
            )
        reference = load_reference(model)
        prompts = random_prompts(reference, 4, random.Random())
        router = f"http://127.0.0.1:{base}"
        served = [generate_ids(router, p, max_new_tokens=24) for p in prompts]
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=180)
    got = agreement_all(reference, prompts, served, "both")
    assert got.all_agree, got
