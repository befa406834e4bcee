"""What the DeepSeek-V4.1 family sets for SGLang's CPU engine at start-up: each default
only where the user set nothing (or something the CPU engine cannot run), only for a
DeepSeek-V4 checkpoint served with ``--device cpu``, each one logged."""

from __future__ import annotations

import json
import os
import random
from types import SimpleNamespace

import pytest
from engram_testing import dsv41_tiny_weights as tiny
from sglang_engram.models.deepseek_v41.cpu_engine import ENV_SWITCHES, MAX_PREFILL_TOKENS
from sglang_engram.models.deepseek_v41.family import DeepseekV41
from sglang_engram.protocol.server_config import EngramServerConfig


def _args(model, **given) -> SimpleNamespace:
    defaults = dict(
        device="cpu", model_path=str(model), kv_cache_dtype="auto", swa_full_tokens_ratio=None,
        chunked_prefill_size=None, max_prefill_tokens=16384,
    )  # fmt: skip
    return SimpleNamespace(**{**defaults, **given})


@pytest.fixture
def model(tmp_path, monkeypatch):
    for name in ENV_SWITCHES:
        # NOTE: set first, so that teardown restores whatever was there before the
        # family's defaults (written to os.environ directly) were
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    (tmp_path / "config.json").write_text(json.dumps(tiny.config()))
    return tmp_path


def test_defaults_fill_what_the_user_left_unset(model):
    args = _args(model)
    config = EngramServerConfig(offload=random.choice(["hbm", "dram", "ssd", "off"]))
    served, changes = DeepseekV41().configure_server(args, config)
    assert served == config
    assert all(os.environ[name] == "0" for name in ENV_SWITCHES)
    assert (args.kv_cache_dtype, args.swa_full_tokens_ratio) == ("bfloat16", 0.5)
    assert args.chunked_prefill_size == args.max_prefill_tokens == MAX_PREFILL_TOKENS
    assert len(changes) == len(ENV_SWITCHES) + 4
    assert all(c.startswith("CPU engine: ") for c in changes)


def test_the_users_choices_stay_unless_the_cpu_engine_cannot_run_them(model, monkeypatch):
    monkeypatch.setenv(ENV_SWITCHES[0], "1")
    args = _args(
        model, kv_cache_dtype="fp8_e4m3", swa_full_tokens_ratio=0.25,
        chunked_prefill_size=512, max_prefill_tokens=20000,
    )  # fmt: skip
    _, changes = DeepseekV41().configure_server(args, EngramServerConfig())
    assert os.environ[ENV_SWITCHES[0]] == "1" and not any(ENV_SWITCHES[0] in c for c in changes)
    assert (args.swa_full_tokens_ratio, args.chunked_prefill_size) == (0.25, 512)
    # refused on the CPU engine / past the sparse prefill's threshold: changed, and said so
    assert args.kv_cache_dtype == "bfloat16" and args.max_prefill_tokens == MAX_PREFILL_TOKENS
    assert sum("--kv-cache-dtype" in c or "--max-prefill-tokens" in c for c in changes) == 2


def test_nothing_changes_off_the_cpu_or_for_another_model(model, tmp_path):
    args = _args(model, device="cuda")
    assert DeepseekV41().configure_server(args, EngramServerConfig()) == (EngramServerConfig(), [])
    assert args.kv_cache_dtype == "auto" and not any(n in os.environ for n in ENV_SWITCHES)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**tiny.config(), "architectures": ["X"]}))
    args = _args(other)
    assert DeepseekV41().configure_server(args, EngramServerConfig())[1] == []
    assert args.kv_cache_dtype == "auto"
