"""The ``engram_qwen3`` model type for transformers' AutoConfig.

The tiny Engram model's ``config.json`` is a Qwen3 config plus the ``engram_*``
fields (kept as plain attributes); SGLang reads configs through AutoConfig, which
must know the model type before ``--model-path`` can point at it.
"""

from __future__ import annotations

from transformers import AutoConfig, Qwen3Config

MODEL_TYPE = "engram_qwen3"


class EngramQwen3Config(Qwen3Config):
    model_type = MODEL_TYPE


def register_config() -> None:
    """Idempotent: AutoConfig keeps the first registration of a model type."""
    AutoConfig.register(MODEL_TYPE, EngramQwen3Config, exist_ok=True)
