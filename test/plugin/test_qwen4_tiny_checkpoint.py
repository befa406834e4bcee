"""The tiny random ``qwen4_exp`` checkpoint: upstream SGLang's own model class loads every
tensor of it (nothing left unloaded, nothing unexpected), its PLE tables arrive row for
row with the checkpoint's constants, and its command line fails in one line."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest
import torch
from engram_testing.qwen4_tiny_checkpoint import write_tiny_checkpoint
from engram_testing.qwen4_tiny_options import TinyQwen4Options
from safetensors import safe_open

from test.plugin.upstream_load import run_script, script_env

CLI = [sys.executable, "-m", "engram_testing.qwen4_tiny_checkpoint"]
# what upstream's model derives rather than loads: Gemma norms' (1 + weight), RoPE tables
DERIVED = ("k_norm.gemma_weight", "q_norm.gemma_weight", "rotary_emb.cos_sin_cache")


@pytest.mark.slow
@pytest.mark.parametrize("ple_dtype", ["fp8", "bf16"])
def test_upstream_loads_every_tensor_and_the_tables_row_for_row(tmp_path, ple_dtype):
    seed = random.randrange(1 << 30)
    model = write_tiny_checkpoint(tmp_path / "m", ple_dtype=ple_dtype, seed=seed)
    got = run_script("test.plugin.qwen4_upstream_load", model)
    assert got["unexpected"] == []
    unloaded = [n for n in got["not_loaded"] if not n.endswith(DERIVED)]
    if ple_dtype == "bf16":  # a bf16 table has no scale; upstream keeps its 1.0
        assert all(n.endswith("ngram_embedding.weight_scale") for n in unloaded), unloaded
        unloaded = []
    assert unloaded == []

    options = TinyQwen4Options(ple_dtype, seed)
    with safe_open(model / "model.safetensors", "pt") as f:
        for index, layer_id in enumerate(options.ple_layer_ids):
            prefix = f"model.language_model.layers.{layer_id - 1}.ple.ple_embedding."
            table = got["tables"][f"model.layers.{layer_id - 1}.ple.ple_embedding"]
            shards = [
                f.get_tensor(f"{prefix}ngram_embedding.shard_{k}.weight")
                for k in range(options.split_ngram_parts)
            ]
            rows = torch.cat(shards)
            assert rows.shape[0] == options.table_rows(index)
            assert {s.shape[0] for s in shards} == {math.ceil(rows.shape[0] / len(shards))}
            assert table["dtype"] == str(rows.dtype)
            assert table["dtype"] == (
                "torch.float8_e4m3fn" if ple_dtype == "fp8" else "torch.bfloat16"
            )
            assert table["rows"] == rows.view(torch.uint8).tolist()
            for buffer in ("layer_multipliers", "ngram_heads_vocab_sizes", "ngram_heads_offsets"):
                assert table[buffer] == f.get_tensor(prefix + buffer).tolist()
            assert table["ngram_heads_vocab_sizes"] == options.head_sizes(index)
            if ple_dtype == "fp8":
                scale = f.get_tensor(f"{prefix}ngram_embedding.weight_scale").float().tolist()
                assert table["weight_scale"] == scale and scale != [1.0]
            else:
                assert table["weight_scale"] == [1.0]
        experts = "model.language_model.layers.0.mlp.experts.1."
        w13 = torch.cat(
            [f.get_tensor(experts + "gate_proj.weight"), f.get_tensor(experts + "up_proj.weight")]
        )
        assert torch.equal(torch.tensor(got["expert1_w13"]), w13.float())


def test_the_two_ple_layers_use_distinct_primes_and_the_config_is_text_only(tmp_path):
    model = write_tiny_checkpoint(tmp_path / "m", seed=random.randrange(100))
    config = json.loads((model / "config.json").read_text())
    text = config["text_config"]
    assert config["architectures"] == ["Qwen4ExpForConditionalGeneration"]
    assert config["language_model_only"] is True
    assert not [key for key in text if key.startswith("indexer_")]
    assert {text["layer_types"][i - 1] for i in text["ple_layer_ids"]} == {"linear_attention"}
    assert "full_attention" in text["layer_types"]
    options = TinyQwen4Options()
    first, second = options.head_sizes(0), options.head_sizes(1)
    assert first == sorted(first) and second[0] > first[-1] and len(set(first + second)) == 32


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    seed = random.randrange(1 << 20)
    a = write_tiny_checkpoint(tmp_path / "a", seed=seed, ple_dtype="bf16")
    b = write_tiny_checkpoint(tmp_path / "b", seed=seed, ple_dtype="bf16")
    c = write_tiny_checkpoint(tmp_path / "c", seed=seed + 1, ple_dtype="bf16")
    weights = [(d / "model.safetensors").read_bytes() for d in (a, b, c)]
    assert weights[0] == weights[1] != weights[2]


def test_cli_writes_a_checkpoint_and_refuses_bad_input_in_one_line(tmp_path):
    out = subprocess.run(
        [*CLI, "--out", str(tmp_path / "m"), "--ple-dtype", "bf16", "--seed", "3"],
        env=script_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "m" / "config.json").is_file() and "bf16" in out.stdout
    (tmp_path / "file").write_text("x")
    for args, words in (
        (["--out", str(tmp_path / "m2"), "--ple-dtype", "fp4"], "invalid choice"),
        (["--out", str(tmp_path / "file")], "is a file"),
        (["--out", str(tmp_path / "m3"), "--seed", "-1"], "must be"),
    ):
        bad = subprocess.run(
            [*CLI, *args], env=script_env(), capture_output=True, text=True, timeout=300
        )
        assert bad.returncode == 2 and words in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_streamed_tables_hold_the_same_tensors_and_repeat_by_seed(tmp_path, monkeypatch):
    from engram_testing import qwen4_tiny_weights as tiny_weights

    # NOTE: shards of several generator chunks each, without writing a table of GiB
    monkeypatch.setattr(tiny_weights, "CHUNK_ROWS", random.randint(50, 300))
    seed = random.randrange(1 << 20)
    drawn = write_tiny_checkpoint(tmp_path / "drawn", seed=seed)
    a, b, c = (
        write_tiny_checkpoint(tmp_path / name, seed=s, stream_tables=True)
        for name, s in (("a", seed), ("b", seed), ("c", seed + 1))
    )
    weights = [(d / "model.safetensors").read_bytes() for d in (a, b, c)]
    assert weights[0] == weights[1] != weights[2]
    with safe_open(drawn / "model.safetensors", "pt") as f, safe_open(a / "model.safetensors", "pt") as g:  # fmt: skip
        assert sorted(f.keys()) == sorted(g.keys())
        for name in f.keys():
            x, y = f.get_tensor(name), g.get_tensor(name)
            assert (x.shape, x.dtype) == (y.shape, y.dtype), name
            if ".shard_" in name:
                rows = y.float()
                chunk = tiny_weights.CHUNK_ROWS
                assert torch.isfinite(rows).all() and 12 < rows.std() < 20, name
                assert not torch.equal(rows[:chunk], rows[chunk : 2 * chunk]), name
