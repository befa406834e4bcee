"""The model families the plugin serves, one folder each (``registry`` lists them), and
the SGLang model architectures of our own (the tiny model), registered when SGLang's
model registry is imported."""

from __future__ import annotations


def register_architectures() -> None:
    """Put every family's own architectures into SGLang's ``ModelRegistry`` (keeps
    upstream's)."""
    import importlib

    from sglang.srt.models.registry import ModelRegistry

    from sglang_engram.models.registry import FAMILIES

    for family in FAMILIES:
        for arch, module_name in family.architectures.items():
            if arch not in ModelRegistry.models:
                ModelRegistry.models[arch] = getattr(importlib.import_module(module_name), arch)
