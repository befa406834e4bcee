"""The per-process runtime: config.json is read once, and reset() starts serving over."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from sglang_engram.integration.cpu_serving import CPU_ENGINE_VAR
from sglang_engram.models.deepseek_v41.row_hasher import EngramRowHasher
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import (
    ENV_VAR,
    EngramServerConfig,
)
from sglang_engram.read_ahead import ssd as ssd_read_ahead
from sglang_engram.tables import served as table_registry
from sglang_engram.tables import weight_filter

from engram.fp8 import quantize_rows
from engram.hashing import NgramHasher
from engram.spec import EngramSpec
from engram.tables import create_table
from test.plugin.tiny import engram_fields, random_token_map, tiny_config
from test.ssd.helpers import write_checkpoint

# what SGLang's ModelConfig reads of a DeepSeek-V4 config.json (a scheduler's context)
DSV4_SHAPES = {
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "index_head_dim": 128,
    "sliding_window": 128,
    "compress_ratios": [0, 4],
    "rope_scaling": None,
    "vocab_size": 1000,
}


def _checkpoint(model: str, path: Path) -> dict:
    """A local checkpoint (config.json and random tables) of the tiny model or of a
    DeepSeek-V4.1-shaped one; returns its config."""
    if model == "tiny":
        config = tiny_config(layer_ids=tuple(sorted(random.sample(range(4), 2))))
        write_checkpoint(path, config, prefix="model.")
    else:
        config = {
            "architectures": ["DeepseekV4ForCausalLM"],
            "model_type": "deepseek_v4",
            **DSV4_SHAPES,
            **engram_fields(layer_ids=(1, 14), n=4, heads=8, head_dim=64),
        }
        write_checkpoint(path, config, prefix="")
    return config


def _open_tables(model: str, config: dict, model_path: str) -> None:
    """What a scheduler builds for the model's Engram layers (in the flags' placement)."""
    if model == "tiny":
        from sglang_engram.models.engram_qwen3.engram_block import EngramBlock

        spec = EngramSpec.from_hf_config(config)
        for layer in spec.layer_ids:
            block = EngramBlock(spec, layer, config["hidden_size"], 1, get_runtime())
            block.open_ssd()  # the model path: the scheduler context's
        return
    from sglang.srt.layers.engram import EngramLayout
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    layout = EngramLayout.from_config(SimpleNamespace(**config))
    for index, layer in enumerate(layout.layer_ids):
        embedding = PlacedEngramEmbedding(
            layout.num_embeddings[index], layout.head_dim, layer, layout.column_bounds(index)
        )
        embedding.finish_load(f"layer {layer}")


@pytest.mark.parametrize("model", ["tiny", "dsv4"])
def test_config_json_is_read_once_per_process(
    sglang_with_plugin, fresh_runtime, monkeypatch, tmp_path, model
):
    """A launcher's start-up (flags, start-up checks, CUDA-graph policy, the placement
    line) and a scheduler's table opening, in one process: the plugin reads the
    checkpoint's config.json once."""
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import prepare_server_args

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv(CPU_ENGINE_VAR, "1")  # a scheduler's context needs a device
    model_path = str(tmp_path / model)
    config = _checkpoint(model, Path(model_path))
    ssd = ["--engram-offload", "ssd", "--engram-ssd-dir", str(tmp_path / "ssd")]
    argv = ["--model-path", model_path, "--device", "cpu", "--disable-prefill-cuda-graph"]
    server_args = prepare_server_args([*argv, *ssd])
    assert get_runtime().serving_config().offload == "ssd"
    context = create_context(
        server_args,
        role="scheduler",
        ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0),
    )
    with use_context(context):
        _open_tables(model, config, model_path)
    layers = config["engram_layer_ids"]
    assert sorted(
        entry.layer_id for entry in table_registry.served(get_runtime().tables)
    ) == sorted(layers)
    assert fresh_runtime.config_json_reads == 1


def test_another_model_path_is_read_on_its_own(fresh_runtime, tmp_path):
    first, second = _checkpoint("tiny", tmp_path / "a"), _checkpoint("dsv4", tmp_path / "b")
    assert get_runtime().model_facts(str(tmp_path / "a")).hf_config == first
    assert get_runtime().model_facts(str(tmp_path / "b")).hf_config == second
    assert get_runtime().model_facts(str(tmp_path / "b")).family.table_layers(second) == (1, 14)
    assert fresh_runtime.config_json_reads == 2


def test_reset_forgets_what_serving_built_and_keeps_registration(
    sglang_with_plugin, fresh_runtime, monkeypatch, tmp_path
):
    """Everything serving resolved and built is gone after one reset() (the read-ahead's
    handles released); the hooks stay applied."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    applied = sglang_with_plugin.hook_status(fresh_runtime.hooks)
    config = EngramServerConfig(offload="ssd", ssd_dir=str(tmp_path), prefetch=True)
    get_runtime().use_config(config)
    _checkpoint("tiny", tmp_path / "tiny")
    get_runtime().model_facts(str(tmp_path / "tiny"))
    layer = random.randint(1, 60)
    weight_filter.skip_tables(get_runtime().skips, layers={layer})
    fields = engram_fields(layer_ids=(layer,), n=random.randint(2, 4))
    spec = EngramSpec.from_hf_config(fields)
    hasher = NgramHasher(spec, random_token_map(spec.vocab_size, random.randint(50, 200)))
    weight, scale = quantize_rows(torch.randn(spec.num_embeddings[0], spec.head_dim))
    table = create_table("ssd", weight, scale, path=tmp_path / "table")
    table_registry.add(get_runtime().tables, layer, table)
    table_registry.set_hasher(get_runtime().tables, EngramRowHasher(hasher))
    tokens = torch.randint(0, spec.vocab_size, (random.randint(1, 8),)).tolist()
    assert ssd_read_ahead.read_ahead_next_step(get_runtime(), [(tokens, tokens[-1:])]) == 1
    assert table.stats()["read_ahead_bytes_held"] > 0
    assert get_runtime().serving_config() == config and fresh_runtime.config_json_reads == 1

    fresh_runtime.reset()

    assert (
        table_registry.served(get_runtime().tables) == []
        and table_registry.hasher(get_runtime().tables) is None
    )
    assert not weight_filter.is_skipped(
        get_runtime().skips, f"model.layers.{layer}.engram.embed.weight"
    )
    assert table.stats()["read_ahead_bytes_held"] == 0
    assert fresh_runtime.model is None and fresh_runtime.config_json_reads == 0
    assert get_runtime().serving_config() == EngramServerConfig()
    assert sglang_with_plugin.hook_status(fresh_runtime.hooks) == applied
    table.close()
