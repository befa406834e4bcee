"""The tiny random DeepSeek-V4.1 checkpoint: upstream SGLang's own model class loads every
parameter of it (on the CPU engine, with the plugin's stand-ins), its Engram tables arrive
row for row in the released format, its tokenizer gives upstream's compressed token map
the config's size (and SGLang's DeepSeek-V4.1 chat encoder its special tokens), the
read-ahead hashes rows as upstream's model does, and its command line fails in one
line."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
import torch
from engram_testing import dsv41_tiny_weights as tiny
from engram_testing.dsv41_tiny_checkpoint import WEIGHTS_FILE, write_tiny_checkpoint
from safetensors import safe_open

from engram.spec import EngramSpec
from test.plugin.upstream_load import run_script, script_env

CLI = [sys.executable, "-m", "engram_testing.dsv41_tiny_checkpoint"]


@pytest.mark.slow
def test_upstream_loads_every_parameter_and_the_tables_row_for_row(tmp_path):
    model = write_tiny_checkpoint(tmp_path / "m", seed=random.randrange(1 << 30))
    got = run_script("test.plugin.dsv41_upstream_load", model)
    assert got["not_loaded"] == []
    # the V4.1 path (hyper-connections from the previous sublayer) on the CPU engine
    assert got["decoder_layer"] == "DeepseekV4PlatformDecoderLayer"
    config = json.loads((model / "config.json").read_text())
    assert got["compressed_vocab_size"] == config["engram_compressed_vocab_size"]
    # the chat encoder finds DeepSeek's special tokens: bos first, ids in the vocabulary
    chat = got["chat_ids"]
    assert chat[0] == got["bos"] == config["bos_token_id"] and max(chat) < config["vocab_size"]
    assert {tiny.BOS_TOKEN_ID, tiny.EOS_TOKEN_ID} < set(range(config["vocab_size"]))
    # the read-ahead's rows (the family's row hasher) are upstream's hash of the model's,
    # for a prompt from its start and for decode steps
    assert got["prompt_rows_equal"] and got["step_rows_equal"] and got["rows_are_ids"]
    spec = EngramSpec.from_hf_config(config)
    assert len(spec.layer_ids) >= 2 and set(config["compress_ratios"]) == {0}
    with safe_open(str(model / WEIGHTS_FILE), "pt") as f:
        for layer, rows in zip(spec.layer_ids, spec.num_embeddings, strict=True):
            table = got["tables"][f"model.layers.{layer}.engram.embed"]
            assert table["class"] == "EngramEmbedding"  # upstream's own, for hbm
            weight = f.get_tensor(f"layers.{layer}.engram.embed.weight")
            scale = f.get_tensor(f"layers.{layer}.engram.embed.scale")
            assert (weight.dtype, scale.dtype) == (torch.float8_e4m3fn, torch.float8_e8m0fnu)
            assert weight.shape == (rows, spec.head_dim)
            assert table["weight"] == weight.view(torch.uint8).tolist()
            assert table["scale"] == scale.view(torch.uint8).tolist()
        experts = "layers.0.ffn.experts.1."
        w13 = torch.cat([f.get_tensor(experts + "w1.weight"), f.get_tensor(experts + "w3.weight")])
        assert torch.equal(torch.tensor(got["expert1_w13"]), w13.float())
        fused = torch.cat(
            [f.get_tensor("layers.0.attn.wq_a.weight"), f.get_tensor("layers.0.attn.wkv.weight")]
        )
        assert torch.equal(torch.tensor(got["wqkv_a"]), fused.float())
        dense = [n for n in f.keys() if f.get_slice(n).get_dtype() not in ("F8_E4M3", "F8_E8M0")]  # noqa: SIM118
        assert {f.get_slice(n).get_dtype() for n in dense} == {"BF16", "F32"}


def test_config_is_sliding_window_v41_with_prime_sized_tables():
    config = tiny.config()
    spec = EngramSpec.from_hf_config(config)  # checks the tables' sizes against their primes
    assert config["model_type"] == "deepseek_v41" and config["num_nextn_predict_layers"] == 0
    assert config["compress_ratios"] == [0] * config["num_hidden_layers"]
    assert spec.layer_ids == tiny.ENGRAM_LAYERS and all(n > 10_000 for n in spec.num_embeddings)
    assert config["sliding_window"] == 128 and config["head_dim"] == 512


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    seed = random.randrange(1 << 20)
    a, b, c = (
        write_tiny_checkpoint(tmp_path / name, seed=s)
        for name, s in (("a", seed), ("b", seed), ("c", seed + 1))
    )
    weights = [(d / WEIGHTS_FILE).read_bytes() for d in (a, b, c)]
    assert weights[0] == weights[1] != weights[2]


def test_cli_writes_a_checkpoint_and_refuses_bad_input_in_one_line(tmp_path):
    out = subprocess.run(
        [*CLI, "--out", str(tmp_path / "m"), "--seed", "3"],
        env=script_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "m" / "config.json").is_file() and "deepseek_v41" in out.stdout
    (tmp_path / "file").write_text("x")
    # NOTE: the first bad argument is the one reported (both are refused)
    bad = subprocess.run(
        [*CLI, "--out", str(tmp_path / "file"), "--seed", "-1"],
        env=script_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and ("is a file" in bad.stderr or "must be" in bad.stderr)
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
