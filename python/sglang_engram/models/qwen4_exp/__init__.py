"""Qwen3.8-Flash-Next (SGLang's ``qwen4_exp``): its PLE n-gram table in the
``--engram-offload`` placement (``family``). Its tiny test checkpoint is
``engram_testing.qwen4_tiny_checkpoint``, outside the shipped plugin."""

__all__ = ["family"]
