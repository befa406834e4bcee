"""Every model family the plugin knows, in the order a checkpoint is matched.

Shared modules ask :func:`family_of` for the served checkpoint's family (through
``args.model_facts``) and then the family itself; adding a family is its folder and
one line here.
"""

from __future__ import annotations

from sglang_engram.models.deepseek_v41.family import DeepseekV41
from sglang_engram.models.engram_qwen3.family import TinyEngram
from sglang_engram.models.family import HfConfig, ModelFamily
from sglang_engram.models.longcat_flash.family import LongcatFlash
from sglang_engram.models.qwen4_exp.family import Qwen4Exp

# NOTE: first match wins: the tiny model's config has Engram fields too, so it comes
# before DeepSeek-V4.1.
FAMILIES: tuple[ModelFamily, ...] = (TinyEngram(), DeepseekV41(), Qwen4Exp(), LongcatFlash())


def family_of(hf_config: HfConfig | None) -> ModelFamily | None:
    """The family of a checkpoint's ``config.json``, or ``None`` (no n-gram tables)."""
    if hf_config is None:
        return None
    return next((family for family in FAMILIES if family.matches(hf_config)), None)


def family_named(name: str) -> ModelFamily:
    for family in FAMILIES:
        if family.name == name:
            return family
    raise KeyError(f"no model family {name!r}; known: {', '.join(f.name for f in FAMILIES)}")


def table_tensor_layer(name: str) -> int | None:
    """The layer of a checkpoint tensor holding table rows of any family, else ``None``."""
    for family in FAMILIES:
        layer = family.table_tensor_layer(name)
        if layer is not None:
            return layer
    return None
