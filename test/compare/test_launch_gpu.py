"""The `launch:` path on a GPU: the sweep starts the tiny model's SGLang server for each
placement, benchmarks it and stops it; the Engram counters come from its /metrics."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest
import yaml
from sglang_engram.compare import facts
from sglang_engram.compare.results import read_results

from test.serving.server import build_tiny_model

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_launch_sweep_on_gpu(tmp_path, tmp_path_factory, offline_env) -> None:
    model = build_tiny_model(tmp_path_factory.mktemp("model") / "tiny-engram")
    spec = {
        "name": "gpu",
        "model": str(model),
        "workload": {"fixed": {"input_len": 256, "output_len": 32}},
        "concurrency": [1, 4],
        "configs": [
            {"name": p, "launch": {"engram_offload": p, "extra_args": ["--mem-fraction-static", "0.3"]}}
            for p in ("hbm", "dram")
        ],
    }
    sku = facts.sku_from_name(facts.local_gpu_name() or "")
    if sku is None:
        spec["sku"] = sku = "unlisted-gpu"  # a GPU missing from facts.SKUS
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    before = {p.pid for p in psutil.process_iter()}
    argv = [sys.executable, "-m", "sglang_engram.compare", "sweep", str(path), "--out", str(out)]
    done = subprocess.run(argv, env=offline_env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_results(out / "results.jsonl")
    assert sorted((r["config"], r["max_concurrency"]) for r in rows) == [
        ("dram", 1), ("dram", 4), ("hbm", 1), ("hbm", 4),
    ]  # fmt: skip
    for row in rows:
        assert row["status"] == "ok" and row["completed"] == 10 * row["max_concurrency"]
        assert row["num_gpus"] == 1 and row["sku"] == sku and row["p90_tpot_ms"] > 0
        assert row["engram"]["rows_per_output_token"] > 0
        assert 0 < row["engram"]["unique_row_ratio"] <= 1
    left = [p for p in psutil.process_iter(["cmdline"]) if p.pid not in before
            and "sglang.launch_server" in " ".join(p.info["cmdline"] or [])]  # fmt: skip
    assert not left, "a server outlived the sweep"
