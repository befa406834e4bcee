"""`sweep` against STAND-IN servers (`standin_server.py`), through the real
`python -m sglang.benchmark.serving`, for the two things a real SGLang server cannot be
made to do: hold a fixed inter-token delay (so the recorded TPOT and the Engram
counters can be checked against known numbers) and die mid-point on purpose. Sweeps of
real servers are in `test_sweep_real.py`.

Each benchmark run imports SGLang (~20 s of CPU), so these tests are marked slow and
keep to a handful of short points.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sglang_engram.compare.deployments import SERVER_CMD_ENV
from sglang_engram.compare.results import read_results

from .conftest import STANDIN

pytestmark = pytest.mark.slow


def _spec(tmp_path: Path, tokenizer_dir: Path, configs: list[dict], **kw) -> Path:
    spec = {
        "name": "t",
        "model": str(tokenizer_dir),
        "sku": "H200",
        "workload": {"fixed": {"input_len": 48, "output_len": 12}},
        "concurrency": [2],
        "prompts_per_concurrency": 3,
        "warmup_per_concurrency": 1,
        "configs": configs,
        **kw,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _sweep(spec: Path, out: Path, env: dict, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "sglang_engram.compare", "sweep", str(spec), "--out", str(out)]
    return subprocess.Popen([*argv, *extra], env=env, stderr=subprocess.PIPE, text=True)


def test_sweep_records_a_standins_fixed_timing(
    tmp_path, tokenizer_dir, offline_env, standin
) -> None:
    itl = random.uniform(20.0, 35.0)
    url = standin(ttft_ms=50, itl_ms=itl, engram_offload="dram")
    config = {"name": "remote", "url": url, "num_gpus": 4, "placement": "dram"}
    spec = _spec(tmp_path, tokenizer_dir, [config])
    proc = _sweep(spec, tmp_path / "out", offline_env)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    [row] = read_results(tmp_path / "out" / "results.jsonl")
    assert row["status"] == "ok" and row["completed"] == 6
    assert row["p90_tpot_ms"] == pytest.approx(itl, rel=0.2)
    assert row["p90_ttft_ms"] >= 50
    assert (row["sku"], row["vendor"], row["num_gpus"], row["max_concurrency"]) == (
        "H200", "nvidia", 4, 2,
    )  # fmt: skip
    assert (row["device"], row["num_devices"]) == ("gpu", 4)
    assert row["software"]["sglang"] == "0.5.23" and row["host"]["dram_gib"] > 0
    engram = row["engram"]
    # The stand-in requests 96 rows per generated token (warm-up tokens included), half
    # unique, 264 bytes each, a quarter of them served by the hot cache.
    assert engram["rows_per_output_token"] >= 96
    assert engram["unique_row_ratio"] == pytest.approx(0.5)
    assert engram["hot_cache_hit_ratio"] == pytest.approx(0.25)
    rows = engram["after"]["rows_requested"] - engram["before"]["rows_requested"]
    assert sum(engram["bytes_read"].values()) == pytest.approx(rows * 0.5 * 264)
    raw = json.loads((tmp_path / "out" / row["raw"]["output"]).read_text().splitlines()[-1])
    assert raw["p90_tpot_ms"] == row["p90_tpot_ms"]
    assert "[1/1] remote C=2" in err and "ETA" in err


def test_dying_standin_is_recorded_and_sweep_goes_on(tmp_path, tokenizer_dir, offline_env) -> None:
    offline_env[SERVER_CMD_ENV] = f"{sys.executable} {STANDIN} --ttft-ms 10 --itl-ms 5"
    configs = [
        {"name": "dies", "launch": {"extra_args": ["--die-after", "3"]}},
        {"name": "healthy", "launch": {"engram_offload": "hbm"}},
    ]
    spec = _spec(tmp_path, tokenizer_dir, configs)
    proc = _sweep(spec, tmp_path / "out", offline_env)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 1, err
    rows = {r["config"]: r for r in read_results(tmp_path / "out" / "results.jsonl")}
    assert set(rows) == {"dies", "healthy"}
    assert rows["dies"]["status"] == "failed" and "server died" in rows["dies"]["error"]
    assert rows["healthy"]["status"] == "ok" and rows["healthy"]["placement"] == "hbm"


def test_resume_runs_only_the_points_of_an_added_config(
    tmp_path, tokenizer_dir, offline_env, standin
) -> None:
    from sglang_engram.compare.resume import spec_record
    from sglang_engram.compare.spec import load_sweep_spec

    url = standin(ttft_ms=10, itl_ms=5, engram_offload="dram")
    old = {"name": "old", "url": url, "num_gpus": 1, "placement": "dram"}
    out = tmp_path / "out"
    out.mkdir()
    # The run so far: config "old" measured (a hand-made point), as its spec.json says.
    (out / "spec.json").write_text(
        spec_record(load_sweep_spec(_spec(tmp_path, tokenizer_dir, [old])))
    )
    recorded = {"config": "old", "max_concurrency": 2, "sku": "H200", "status": "ok",
                "p90_tpot_ms": random.uniform(1, 9)}  # fmt: skip
    (out / "results.jsonl").write_text(json.dumps(recorded) + "\n")
    new = {**old, "name": "new", "placement": "hbm"}
    spec = _spec(tmp_path, tokenizer_dir, [old, new])
    proc = _sweep(spec, out, offline_env, "--resume")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "resuming: 1 points already recorded, 1 to run" in err
    first, added = read_results(out / "results.jsonl")
    assert first == recorded and added["config"] == "new" and added["status"] == "ok"
    assert [c["name"] for c in json.loads((out / "spec.json").read_text())["configs"]] == [
        "old",
        "new",
    ]
