"""The SGLang model architectures of the plugin's own families (the tiny model), put
into SGLang's ``ModelRegistry`` when it is first imported (a ``CALL`` hook).

NOTE: SGLang builds a model class with its own arguments, so each of ours receives
this process's runtime as the class attribute ``runtime`` when it is registered.
"""

from __future__ import annotations

import importlib

from sglang_engram.protocol.registry import families
from sglang_engram.protocol.runtime import EngramRuntime


def register_architectures(runtime: EngramRuntime) -> None:
    """Put every family's own architectures, bound to ``runtime``, into SGLang's
    ``ModelRegistry`` (keeps upstream's)."""
    from sglang.srt.models.registry import ModelRegistry

    for family in families():
        for arch, module_name in family.architectures.items():
            if arch not in ModelRegistry.models:
                model_class = getattr(importlib.import_module(module_name), arch)
                model_class.runtime = runtime
                ModelRegistry.models[arch] = model_class
