"""The plugin tests run against the installed SGLang with our plugin loaded."""

from __future__ import annotations

import warnings

import pytest


@pytest.fixture(autouse=True)
def fresh_runtime():
    """Each test serves as a fresh process would: nothing resolved or built before it,
    nothing it built left behind (registration stays: SGLang's classes stay hooked)."""
    from sglang_engram.runtime import get_runtime

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
