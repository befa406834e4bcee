"""``examples/pd-cluster-dsv41-cpu.yaml``: a valid spec whose plan starts a DeepSeek-V4.1
prefill worker with Engram in ``hbm`` and a decode worker in ``dram`` on SGLang's CPU
engine, KV over mooncake TCP, the router in PD mode; its commented variant (decode
``off``) is a valid spec too. (``test_dsv41_pd.py`` serves the same pairings.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from sglang_engram.cluster.spec import parse_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pd-cluster-dsv41-cpu.yaml"


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_plan_runs_prefill_hbm_and_decode_dram_on_the_cpu_engine(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "sglang_engram.cluster", "plan", str(EXAMPLE), "--json",
         "--log-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    prefill, decode = plan["workers"]
    assert [(w["role"], w["gpus"]) for w in (prefill, decode)] == [("prefill", 0), ("decode", 0)]
    p, d = prefill["command"], decode["command"]
    assert (_after(p, "--engram-offload"), _after(d, "--engram-offload")) == ("hbm", "dram")
    assert _after(p, "--model-path").endswith("models/dsv41-tiny")
    for command, worker in ((p, prefill), (d, decode)):
        assert _after(command, "--device") == "cpu"
        assert _after(command, "--disaggregation-transfer-backend") == "mooncake_tcp"
        assert worker["env"]["SGLANG_USE_CPU_ENGINE"] == "1"
    router = plan["router"]["command"]
    assert "--pd-disaggregation" in router and _after(router, "--decode") == decode["url"]


def test_the_commented_decode_off_variant_is_a_valid_spec():
    text = EXAMPLE.read_text()
    variant = "\n".join(
        line.replace("  # ", "  ", 1) if line.startswith("  # ") and ":" in line else line
        for line in text.splitlines()
        if "The seeds'" not in line
    )
    data = yaml.safe_load(variant)
    workers = data["workers"]
    assert [w["engram_offload"] for w in workers] == ["hbm", "dram", "off"]
    data["workers"] = [workers[0], workers[2]]
    spec = parse_spec(data)
    assert [(g.role, g.engram_offload) for g in spec.workers] == [
        ("prefill", "hbm"),
        ("decode", "off"),
    ]
