"""``--engram-offload`` on Qwen3.8-Flash-Next: mapped onto upstream's
``--ple-offload-embedding`` through SGLang's own argument parsing."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest
from sglang_engram.models.qwen4_exp.family import Qwen4Exp
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig

from engram.errors import EngramConfigError


def _write_config(path, nested: bool) -> str:
    text = {
        "model_type": "qwen4_exp_text",
        "vocab_size": random.randint(500, 2000),
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "intermediate_size": 128,
        "ple_layer_ids": [2],
        "ple_embed_dim": 128,
        "ngram_vocab_size_base": random.randint(300, 900),
        "eos_token_id": 7,
    }
    config = {"architectures": ["Qwen4ExpForConditionalGeneration"], "model_type": "qwen4_exp"}
    config.update({"text_config": text} if nested else {**text, "model_type": "qwen4_exp"})
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


@pytest.fixture
def parse(sglang_with_plugin, tmp_path, monkeypatch):
    from sglang.srt.server_args import prepare_server_args

    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    model = _write_config(tmp_path / "m", nested=random.random() < 0.5)

    def run(*flags: str):
        return prepare_server_args(["--model-path", model, "--device", "cpu", *flags])

    return run


@pytest.mark.parametrize("offload", ["hbm", "dram", "off"])
def test_each_placement_sets_upstreams_offload_flag_on_the_cpu_engine(parse, offload) -> None:
    args = parse("--engram-offload", offload)
    # NOTE: on the CPU engine upstream's pinned-host path (CUDA) cannot run: dram is
    # upstream's table in host memory, where every CPU-engine table lives.
    assert args.ple_offload_embedding is False
    assert get_runtime().serving_config().offload == offload


def test_upstreams_flag_alone_decides_the_placement(parse) -> None:
    parse("--no-ple-offload-embedding")
    assert get_runtime().serving_config().offload == "hbm"


def test_contradicting_flags_are_refused_in_one_line(parse) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--engram-offload", "off", "--ple-offload-embedding")
    assert str(exc.value) == (
        "sglang-engram: error: --engram-offload off and --ple-offload-embedding ask for "
        "different places for the PLE table; pass only --engram-offload off"
    )


@pytest.mark.parametrize(
    ("offload", "pinned"), [("hbm", False), ("dram", True), ("ssd", False), ("off", False)]
)
def test_on_a_gpu_dram_is_upstreams_pinned_host_table(offload, pinned) -> None:
    # NOTE: the namespace stands in for SGLang's ServerArgs on a GPU machine (a real
    # one cannot resolve device "cuda" here); configure_server reads and sets two fields.
    args = SimpleNamespace(device="cuda", ple_offload_embedding=None)
    config = EngramServerConfig(offload=offload, offload_explicit=True)
    kept, changes = Qwen4Exp().configure_server(args, config)
    assert kept == config and args.ple_offload_embedding is pinned and len(changes) == 1
    args.ple_offload_embedding = not pinned
    with pytest.raises(EngramConfigError, match="ask for different places"):
        Qwen4Exp().configure_server(args, config)


def test_sglang_serve_picks_the_engram_backend_for_a_qwen4_checkpoint(tmp_path) -> None:
    from sglang.cli.serve import _create_backend_registry
    from sglang.cli.serve_backends import ServeRequest

    model = _write_config(tmp_path / "q", nested=True)
    picked = _create_backend_registry().auto_detect(ServeRequest(argv=(), model_path=model))
    assert picked.name == "engram"
