"""``EngramQwen3ForCausalLM``: the tiny Engram model on SGLang's layers (``model``), its
Engram block over one of our tables (``engram_block``), its hasher over SGLang's
per-request history slots (``hasher``), the checkpoint's weight routes (``weights``) and
the ``engram_qwen3`` model type for transformers (``hf_config``).
"""

__all__ = ["engram_block", "hasher", "hf_config", "model", "weights"]
