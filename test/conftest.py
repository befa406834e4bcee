"""Shared pytest setup: GPU tests skip themselves where no CUDA/ROCm device exists."""

from __future__ import annotations

import pytest


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture(scope="session")
def trained_tiny_model(tmp_path_factory: pytest.TempPathFactory):
    """The bundled trained tiny Engram model, built once per test session and shared by
    every directory's servers, tools and references (all of them only read it)."""
    from test.serving.server import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("shared-model") / "tiny-engram")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA or ROCm GPU (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
