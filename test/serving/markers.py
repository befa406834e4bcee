"""Pytest marks of the serving tests (kept here: ``engram_testing`` imports without
pytest, where a benchmark uses it)."""

from __future__ import annotations

import importlib.util

import pytest

# NOTE: PD servers move the KV cache with mooncake (``engram_testing.server.TRANSFER``)
needs_mooncake = pytest.mark.skipif(
    importlib.util.find_spec("mooncake") is None,
    reason="no mooncake KV transfer (pip install -e '.[pd-cpu]' without a GPU)",
)
