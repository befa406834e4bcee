"""SGLang model architectures of the plugin (imported when SGLang's registry is)."""

from __future__ import annotations

ARCHITECTURES = {"EngramQwen3ForCausalLM": "sglang_engram.models.engram_qwen3.model"}


def register_architectures() -> None:
    """Put our architectures into SGLang's ``ModelRegistry`` (keeps upstream's own)."""
    import importlib

    from sglang.srt.models.registry import ModelRegistry

    from sglang_engram.models.engram_qwen3.hf_config import register_config

    register_config()
    for arch, module_name in ARCHITECTURES.items():
        if arch not in ModelRegistry.models:
            ModelRegistry.models[arch] = getattr(importlib.import_module(module_name), arch)
