"""Qwen3.8-Flash-Next (SGLang's ``qwen4_exp``): its PLE n-gram table in the
``--engram-offload`` placement (``family``), and a tiny checkpoint of its shape."""

__all__ = ["family"]
