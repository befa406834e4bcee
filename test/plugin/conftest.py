"""The plugin tests run against the installed SGLang with our plugin loaded."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest


@pytest.fixture(autouse=True)
def fresh_runtime():
    """Each test serves as a fresh process would: nothing resolved or built before it,
    nothing it built left behind (registration stays: SGLang's classes stay hooked)."""
    from sglang_engram.protocol.runtime import get_runtime

    get_runtime().reset()
    yield get_runtime()
    get_runtime().reset()


@pytest.fixture(scope="session")
def sglang_with_plugin():
    """SGLang's own ``load_plugins()``: discovers our entry point and applies the hooks."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sglang.srt.plugins import load_plugins

        load_plugins()
    from sglang_engram.integration import plugin

    return plugin


@pytest.fixture(scope="session")
def cpu_context(sglang_with_plugin):
    """A published single-rank SGLang runtime context (what a scheduler process has)."""
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs

    context = create_context(
        ServerArgs(model_path="dummy"),
        role="scheduler",
        ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0),
    )
    with use_context(context):
        yield context


@pytest.fixture
def layout(cpu_context):
    """A small DeepSeek-V4.1-shaped Engram layout (upstream's ``EngramLayout``)."""
    from sglang.srt.layers.engram import EngramLayout

    from test.plugin.tiny import engram_fields

    fields = engram_fields(layer_ids=(1, 14), n=3, heads=4, head_dim=64)
    return EngramLayout.from_config(SimpleNamespace(**fields))


@pytest.fixture
def placed(cpu_context, layout):
    """Build (served, upstream) embeddings of one layer with ``config``, same rows
    loaded: ``served`` as SGLang builds it (our class picks the code), ``upstream``
    from upstream's class directly."""
    import torch
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding
    from sglang_engram.protocol.runtime import get_runtime
    from sglang_engram.protocol.server_config import EngramServerConfig

    from test.plugin.tiny import random_table

    get_runtime().reset()

    def build(config: EngramServerConfig, index: int = 0):
        get_runtime().use_config(config)
        args = (
            layout.num_embeddings[index],
            layout.head_dim,
            layout.layer_ids[index],
            layout.column_bounds(index),
        )
        served, ref = PlacedEngramEmbedding(*args), PlacedEngramEmbedding.__base__(*args)
        weight, scale = random_table(layout.num_embeddings[index], layout.head_dim)
        weight, scale = weight.view(torch.float8_e4m3fn), scale.view(torch.float8_e8m0fnu)
        for module in (served, ref):
            module.weight.weight_loader(module.weight, weight)
            module.scale.weight_loader(module.scale, scale)
            module.finish_load(f"layer {layout.layer_ids[index]}")
        return served, ref

    yield build
    get_runtime().reset()
