"""Shared pytest setup: GPU tests skip themselves where no CUDA/ROCm device exists; the
servers tests start stop without SGLang's crash-dump pause."""

from __future__ import annotations

import os

import pytest

from test.ssd.gated_reader import gated  # noqa: F401 - a fixture for every test module

# NOTE: SGLang 0.5.23 sleeps 5 s whenever a server stops, to take py-spy and CUDA core dumps
# of its schedulers (SGLANG_PYSPY_DUMP_BEFORE_CRASH and SGLANG_CUDA_COREDUMP_BEFORE_CRASH, on
# by default); the tests stop dozens of servers and never read such dumps. Every server a
# test starts (directly, through sweeps or through Ray) inherits this environment.
os.environ.setdefault("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "0")
os.environ.setdefault("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", "0")


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _cpu_engine_switches_restored():
    """NOTE: parsing a DeepSeek-V4 checkpoint's flags on the CPU engine in-process (as the
    plugin's flag tests do) writes the family's switches to os.environ, as a launcher does
    for its schedulers; left there, every server a later test starts would inherit them
    and log no change of its own. Each test ends with them as it found them."""
    from sglang_engram.models.deepseek_v41.cpu_engine import ENV_SWITCHES

    before = {name: os.environ.get(name) for name in ENV_SWITCHES}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def trained_tiny_model(tmp_path_factory: pytest.TempPathFactory):
    """The bundled trained tiny Engram model, built once per test session and shared by
    every directory's servers, tools and references (all of them only read it)."""
    from engram_testing.server import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("shared-model") / "tiny-engram")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA or ROCm GPU (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
