"""`sweep` against real SGLang servers (SGLang's CPU engine on a machine without a GPU,
the GPU where there is one), through the real `python -m sglang.benchmark.serving`.

One `launch:` sweep (dram and off at two concurrencies, plus a config whose server
cannot start) is interrupted once its dram points are in and resumed: complete points,
the dram server's Engram counters against the off server's none, the hardware
recorded, every server stopped by the interrupt, no point repeated. A multi-turn workload goes
to a `url:` config, one more real server. Each server takes ~40-60 s to start on 2 CPU
cores, so the workload is a handful of short requests.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml
from engram_testing.server import sglang_server
from sglang_engram.compare import facts
from sglang_engram.compare.results import read_results
from sglang_engram.integration.kernel_standin import gpu_present

pytestmark = pytest.mark.slow

TAG_VAR = "SGLANG_ENGRAM_SWEEP_TEST_TAG"
ON_CPU = not gpu_present()


@pytest.fixture(scope="module")
def model(trained_tiny_model: Path) -> Path:
    return trained_tiny_model


def _spec(tmp_path: Path, model: Path, configs: list[dict], **kw) -> Path:
    spec = {
        "name": "real",
        "model": str(model),
        "device": "cpu" if ON_CPU else "gpu",
        "workload": {"fixed": {"input_len": 32, "output_len": 8}},
        "concurrency": [1, 2],
        "prompts_per_concurrency": 3,
        "warmup_per_concurrency": 1,
        "point_timeout_s": 600,
        "configs": configs,
        **kw,
    }
    if not ON_CPU and facts.sku_from_name(facts.local_gpu_name() or "") is None:
        spec["sku"] = "unlisted-gpu"  # a GPU missing from facts.SKUS
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _launch(offload: str, *extra: str) -> dict:
    gpu = [] if ON_CPU else ["--mem-fraction-static", "0.3"]
    return {"engram_offload": offload, "extra_args": [*gpu, *extra]}


def _sweep(spec: Path, out: Path, env: dict, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "sglang_engram.compare", "sweep", str(spec), "--out", str(out)]
    return subprocess.Popen([*argv, *extra], env=env, stderr=subprocess.PIPE, text=True)


def _tagged(tag: str) -> list[psutil.Process]:
    """Live processes started with ``TAG_VAR=tag`` (the sweep's servers inherit it,
    schedulers included, whatever they renamed themselves to)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG_VAR) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def _servers(tag: str) -> list[psutil.Process]:
    return [p for p in _tagged(tag) if "sglang_engram.compare" not in " ".join(_cmdline(p))]


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def _check_hardware(row: dict) -> None:
    if ON_CPU:
        assert (row["device"], row["vendor"], row["num_gpus"], row["num_devices"]) == (
            "cpu", "cpu", 0, 1,
        )  # fmt: skip
        assert row["sku"] == facts.sku_from_cpu_name(facts.local_cpu_name())
    else:
        assert (row["device"], row["num_gpus"], row["num_devices"]) == ("gpu", 1, 1)


def test_launch_sweep_interrupted_and_resumed(tmp_path, model, offline_env) -> None:
    tag = uuid.uuid4().hex
    offline_env[TAG_VAR] = tag
    configs = [
        {"name": "dram", "launch": _launch("dram")},
        {"name": "off", "launch": _launch("off")},
        {"name": "broken", "launch": _launch("dram", "--max-total-tokens", "lots")},
    ]
    spec = _spec(tmp_path, model, configs)
    out = tmp_path / "out"
    proc = _sweep(spec, out, offline_env)
    deadline = time.monotonic() + 900
    # NOTE: interrupted while the off server starts, its log the sign that it spawned.
    while len(_rows(out)) < 2 or not (out / "servers" / "off.log").exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the dram points did not finish in 15 minutes"
        time.sleep(0.5)
    assert _servers(tag), "the sweep's off server is not running"
    # NOTE: SIGTERM takes Ctrl-C's path (KeyboardInterrupt); SIGINT would be ignored
    # where the test itself runs as a background job.
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert not _servers(tag), "a server outlived the interrupted sweep"
    assert "interrupted" in err
    first = _rows(out)
    assert [(r["config"], r["max_concurrency"]) for r in first] == [("dram", 1), ("dram", 2)]

    proc = _sweep(spec, out, offline_env, "--resume")
    _, err = proc.communicate(timeout=1200)
    assert proc.returncode == 1, err[-3000:]  # the broken config
    assert "resuming: 2 points already recorded, 4 to run" in err
    assert "starting dram" not in err and "starting off" in err
    broken = [ln for ln in err.splitlines() if ln.startswith("error:") and "broken" in ln]
    assert len(broken) == 1 and "could not start" in broken[0], err[-3000:]
    rows = _rows(out)
    assert rows[:2] == first
    by_key = {(r["config"], r["max_concurrency"]): r for r in rows}
    assert sorted(by_key) == [("dram", 1), ("dram", 2), ("off", 1), ("off", 2)]
    assert len(rows) == 4  # the broken config records nothing
    for (config, c), row in by_key.items():
        assert row["status"] == "ok" and row["kind"] == "launch", row.get("error")
        assert row["completed"] == row["num_prompts"] == 3 * c
        assert row["p90_tpot_ms"] > 0 and row["total_throughput"] > 0
        assert row["placement"] == config and row["software"]["sglang"] == "0.5.23"
        _check_hardware(row)
        engram = row["engram"]
        if config == "dram":
            assert engram["rows_per_output_token"] > 0
            assert 0 < engram["unique_row_ratio"] <= 1
            assert sum(engram["bytes_read"].values()) > 0
        else:
            assert engram["rows_per_output_token"] == 0
            assert sum(engram["bytes_read"].values()) == 0
            assert not any(engram["table_bytes"].values())
    assert not _tagged(tag), "a process of the sweep outlived it"


def test_multi_turn_workload_on_a_url_server(tmp_path, model, offline_env) -> None:
    # NOTE: the tiny model has no chat template; the chat API needs one.
    with sglang_server(
        model, "--engram-offload", "dram", "--chat-template", "chatml",
        log=tmp_path / "server.log",
    ) as url:  # fmt: skip
        config = {"name": "chat", "url": url, "placement": "dram"}
        if not ON_CPU:
            config["num_gpus"] = 1
        work = {"multi-turn": {"system_prompt_len": 24, "question_len": 6, "output_len": 4,
                               "turns": 3, "sessions_per_prefix": 2}}  # fmt: skip
        spec = _spec(tmp_path, model, [config], workload=work, concurrency=[2])
        proc = _sweep(spec, tmp_path / "out", offline_env)
        _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    [row] = _rows(tmp_path / "out")
    # 3 x C = 6 sessions, 2 per prefix: 3 prefixes x 2 sessions x 3 turns.
    assert row["status"] == "ok" and row["completed"] == 18 and row["kind"] == "url"
    assert row["backend"] == "sglang-oai-chat" and row["p90_tpot_ms"] > 0
    assert row["engram"]["rows_per_output_token"] > 0
    assert row["device"] == ("cpu" if ON_CPU else "gpu")
    if ON_CPU:
        assert row["cpu_cores"] is None  # a url server's cores are not known here


def _rows(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return read_results(path) if path.exists() else []
