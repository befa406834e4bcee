"""The CPU engine's PD adjustments (``sglang_engram.integration.cpu_serving``) through SGLang's own
argument parsing with the plugin loaded: what changes on ``--device cpu``, and that
nothing changes on another device or where the user chose the setting."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sglang_engram.integration.cpu_serving import CPU_ENGINE_VAR, EARLY_SEND_VAR
from sglang_engram.protocol.server_config import ENV_VAR

from test.plugin.tiny import tiny_config, write_model_dir


@pytest.fixture
def model_dir(tmp_path):
    return str(write_model_dir(tmp_path / "tiny", tiny_config()))


@pytest.fixture
def parse(sglang_with_plugin, monkeypatch):
    """``prepare_server_args`` on the CPU engine; the early-send variable starts unset and
    is restored afterwards (``adjust_for_cpu`` sets it in this process)."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv(CPU_ENGINE_VAR, "1")
    monkeypatch.setenv(EARLY_SEND_VAR, "")
    monkeypatch.delenv(EARLY_SEND_VAR)
    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args


def _pd(model_dir: str, role: str, *extra: str) -> list[str]:
    return ["--model-path", model_dir, "--disaggregation-mode", role, *extra]


def test_cpu_decode_worker_backs_up_retracted_requests_in_host_tensors(parse, model_dir):
    args = parse(_pd(model_dir, "decode", "--device", "cpu"))
    assert args.disaggregation_decode_retraction_backup == "cpu_tensor"
    assert EARLY_SEND_VAR not in os.environ  # a decode worker sends nothing


def test_cpu_prefill_worker_sends_no_cached_prefix_early(parse, model_dir):
    args = parse(_pd(model_dir, "prefill", "--device", "cpu"))
    assert os.environ[EARLY_SEND_VAR] == "0"
    assert args.disaggregation_decode_retraction_backup is None


@pytest.mark.parametrize("choice", ["cpu_tensor", "host_pool", "none"])
def test_a_chosen_retraction_backup_is_kept(parse, model_dir, choice):
    argv = _pd(model_dir, "decode", "--device", "cpu")
    args = parse([*argv, "--disaggregation-decode-retraction-backup", choice])
    assert args.disaggregation_decode_retraction_backup == choice


@pytest.mark.parametrize("value", ["1", "0"])
def test_a_chosen_early_send_is_kept(parse, model_dir, monkeypatch, value):
    monkeypatch.setenv(EARLY_SEND_VAR, value)
    parse(_pd(model_dir, "prefill", "--device", "cpu"))
    assert os.environ[EARLY_SEND_VAR] == value


@pytest.mark.parametrize("device", [None, "cuda"])
def test_nothing_changes_off_the_cpu(parse, model_dir, monkeypatch, device):
    monkeypatch.delenv(CPU_ENGINE_VAR)
    extra = ["--device", device] if device else []
    decode = parse(_pd(model_dir, "decode", *extra))
    assert decode.disaggregation_decode_retraction_backup is None
    parse(_pd(model_dir, "prefill", *extra))
    assert EARLY_SEND_VAR not in os.environ


def test_a_single_cpu_server_is_left_alone(parse, model_dir):
    args = parse(["--model-path", model_dir, "--device", "cpu"])
    assert args.disaggregation_decode_retraction_backup is None
    assert EARLY_SEND_VAR not in os.environ


SENDER_PROBE = """
import warnings
warnings.simplefilter("ignore")
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.disaggregation.mooncake.conn import MooncakeKVSender
print(MooncakeKVSender.supports_host_tensor_indices)
"""


@pytest.mark.parametrize(("cpu_engine", "expected"), [("1", "False"), (None, "True")])
def test_mooncake_sender_takes_the_plain_path_on_the_cpu_engine(cpu_engine, expected):
    """The CALL hook runs when SGLang's mooncake module is imported (a fresh process:
    the hook fires once per import)."""
    env = {k: v for k, v in os.environ.items() if k != CPU_ENGINE_VAR}
    if cpu_engine:
        env[CPU_ENGINE_VAR] = cpu_engine
    out = subprocess.run(
        [sys.executable, "-c", SENDER_PROBE],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == expected
