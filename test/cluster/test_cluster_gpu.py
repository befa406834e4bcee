"""On a GPU: one prefill and one decode SGLang worker sharing one GPU, the tiny Engram
model, a real KV transfer backend and the real router; a greedy request through the
router returns the same text as a single server.

The decode worker keeps Engram with the tables in DRAM: the same rows and arithmetic as
the single server's HBM tables, so the texts must match exactly (with Engram off on the
decode side, the generated tokens would legitimately differ).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import urllib.request

import pytest

from test.cluster.util import free_block, wait_for

pytestmark = pytest.mark.gpu


def _transfer_backend() -> str:
    # NOTE: nixl first (over UCX it works without an RDMA NIC); mooncake over TCP.
    for module, backend in (("nixl", "nixl"), ("mooncake", "mooncake_tcp")):
        if importlib.util.find_spec(module) is not None:
            return backend
    pytest.skip("no KV transfer backend installed (pip install nixl or mooncake-transfer-engine)")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "model"
    subprocess.run(
        [sys.executable, "-m", "engram.model", "build", "--out", str(out)], check=True, timeout=900
    )
    return out


def _generate(url: str, prompt: str) -> str:
    body = {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": 24}}
    req = urllib.request.Request(
        f"{url}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())["text"]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


def test_pd_cluster_greedy_text_matches_a_single_server(tiny_model, tmp_path):
    backend = _transfer_backend()
    base = free_block(6)
    spec = tmp_path / "gpu.yaml"
    spec.write_text(
        f"""name: gpu{random.randint(0, 10**6)}
model: {tiny_model}
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
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["SGLANG_ENGRAM_CLUSTER_HOME"] = str(tmp_path / "home")
    words = ["engram", "table", "memory", "token", "prefill", "decode", "cache", "gate"]
    prompt = " ".join(random.choices(words, k=random.randint(6, 16)))

    up = subprocess.Popen(
        [sys.executable, "-m", "sglang_engram.cluster", "up", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        for line in up.stdout:
            if line.startswith("ready: "):
                break
        else:
            pytest.fail(f"up exited with {up.wait()} before the cluster was ready")
        pd_text = _generate(f"http://127.0.0.1:{base}", prompt)
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=180)

    port = base + 5
    single = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(tiny_model),
            "--port",
            str(port),
            "--engram-offload",
            "hbm",
            "--mem-fraction-static",
            "0.3",
        ],
        start_new_session=True,
    )
    try:
        wait_for(lambda: _healthy(f"http://127.0.0.1:{port}"), 900, "the single server")
        single_text = _generate(f"http://127.0.0.1:{port}", prompt)
    finally:
        os.killpg(single.pid, signal.SIGTERM)
        single.wait(timeout=120)
    assert pd_text and pd_text == single_text
