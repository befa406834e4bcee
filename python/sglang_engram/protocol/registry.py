"""Every model family the plugin knows, by import path, in the order a checkpoint is
matched.

Shared modules ask :func:`family_of` for the served checkpoint's family (through
:mod:`~sglang_engram.protocol.model_facts`) and then the family itself. Adding a family
is its folder under ``models/`` and one line here. The families are imported on first
use, so this module (the protocol) imports none of them.
"""

from __future__ import annotations

import importlib
from functools import cache

from sglang_engram.protocol.family import HfConfig, ModelFamily

# NOTE: first match wins: the tiny model's config has Engram fields too, so it comes
# before DeepSeek-V4.1.
FAMILY_PATHS: tuple[str, ...] = (
    "sglang_engram.models.engram_qwen3.family:TinyEngram",
    "sglang_engram.models.deepseek_v41.family:DeepseekV41",
    "sglang_engram.models.qwen4_exp.family:Qwen4Exp",
    "sglang_engram.models.longcat_flash.family:LongcatFlash",
)


@cache
def families() -> tuple[ModelFamily, ...]:
    """One instance of every family, in matching order (imported on the first call)."""
    found = []
    for path in FAMILY_PATHS:
        module, _, name = path.partition(":")
        found.append(getattr(importlib.import_module(module), name)())
    return tuple(found)


def family_of(hf_config: HfConfig | None) -> ModelFamily | None:
    """The family of a checkpoint's ``config.json``, or ``None`` (no n-gram tables)."""
    if hf_config is None:
        return None
    return next((family for family in families() if family.matches(hf_config)), None)


def table_tensor_layer(name: str) -> int | None:
    """The layer of a checkpoint tensor holding table rows of any family, else ``None``."""
    for family in families():
        layer = family.table_tensor_layer(name)
        if layer is not None:
            return layer
    return None
