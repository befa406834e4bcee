"""The model-family registry: each checkpoint finds its family, shared modules ask it."""

from __future__ import annotations

import logging
import random

import pytest
from sglang_engram.args.startup_checks import check_startup
from sglang_engram.models.engram_qwen3.family import ARCHITECTURE
from sglang_engram.protocol.registry import families, family_of, table_tensor_layer
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig

from test.plugin.tiny import engram_fields, tiny_config, write_model_dir


def _qwen4_config(ple_layer_ids: list[int], nested: bool) -> dict:
    text = {
        "model_type": "qwen4_exp_text",
        "ple_layer_ids": ple_layer_ids,
        "ngram_size": 3,
        "vocab_size": random.randrange(1000, 200_000),
    }
    if nested:
        return {"model_type": "qwen4_exp", "text_config": text}
    return {**text, "model_type": "qwen4_exp"}


def _configs() -> dict[str, dict]:
    ple = sorted(random.sample(range(1, 40), 2))
    return {
        "engram_qwen3": tiny_config(),
        "deepseek_v41": {
            "architectures": ["DeepseekV4ForCausalLM"],
            "vocab_size": random.randrange(1000, 200_000),
            **engram_fields(),
        },
        "qwen4_exp": _qwen4_config(ple, nested=random.random() < 0.5),
        "longcat_flash": {
            "model_type": "longcat_flash",
            "ngram_vocab_size_ratio": 78,
            "vocab_size": random.randrange(1000, 200_000),
        },
    }


def test_each_checkpoint_finds_its_family_and_only_it() -> None:
    configs = _configs()
    for name, config in configs.items():
        assert [f.name for f in families() if f.matches(config)][:1] == [name]
        assert family_of(config).name == name
    plain = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}
    assert family_of(plain) is None and family_of(None) is None
    no_ple = _qwen4_config([], nested=True)
    assert family_of(no_ple) is None  # a qwen4_exp config without PLE layers has no table
    assert family_of({"model_type": "longcat_flash"}) is None  # no n-gram embedding


def test_table_layers_are_the_directory_indices() -> None:
    configs = _configs()
    text = configs["qwen4_exp"].get("text_config", configs["qwen4_exp"])
    # NOTE: ple_layer_ids are 1-based; the tensors (and table directories) carry the
    # 0-based decoder layer index.
    assert family_of(configs["qwen4_exp"]).table_layers(configs["qwen4_exp"]) == tuple(
        i - 1 for i in text["ple_layer_ids"]
    )
    dsv4 = configs["deepseek_v41"]
    assert family_of(dsv4).table_layers(dsv4) == tuple(dsv4["engram_layer_ids"])
    assert family_of(configs["longcat_flash"]).table_layers(configs["longcat_flash"]) == ()


def test_the_weight_filter_knows_every_familys_table_tensors() -> None:
    layer = random.randint(0, 60)
    for name in (
        f"layers.{layer}.engram.embed.weight",
        f"model.layers.{layer}.engram.embed.scale",
        f"model.language_model.layers.{layer}.ple.ple_embedding.ngram_embedding.shard_"
        f"{random.randint(0, 511)}.weight",
        f"model.language_model.layers.{layer}.ple.ple_embedding.ngram_embedding.weight_scale",
    ):
        assert table_tensor_layer(name) == layer, name
    for name in (
        f"model.layers.{layer}.engram.wkv.weight",
        f"model.language_model.layers.{layer}.ple.key_proj.weight",
        f"model.language_model.layers.{layer}.ple.ple_embedding.layer_multipliers",
    ):
        assert table_tensor_layer(name) is None, name


def test_the_tiny_architecture_is_named_alike_in_core_and_plugin() -> None:
    from engram.model.config import ARCHITECTURE as CORE

    assert ARCHITECTURE == CORE


@pytest.mark.parametrize("offload", ["hbm", "ssd"])
def test_flags_on_a_family_left_to_upstream_warn_and_name_who_serves_it(
    tmp_path, caplog, offload
) -> None:
    model = write_model_dir(tmp_path / "m", _configs()["longcat_flash"])
    config = EngramServerConfig(offload=offload, offload_explicit=True)
    with caplog.at_level(logging.WARNING):
        check_startup(get_runtime(), config, model_path=str(model))
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"--engram-* flags ignored: {model} is LongCat-Flash")
    assert "leaves it to upstream" in warning and "serving it normally" in warning


def test_each_family_names_a_checkpoint_format_the_converter_knows() -> None:
    """The ssd placement converts a family's tables from the checkpoint format the
    family names; a family whose tables the plugin serves names one."""
    from engram.ssd.checkpoint_formats import CHECKPOINT_FORMATS

    named = {f.name: f.checkpoint_format for f in families()}
    assert {name for name, fmt in named.items() if fmt is None} == {
        f.name for f in families() if not f.served
    }
    assert {fmt for fmt in named.values() if fmt is not None} == set(CHECKPOINT_FORMATS)
