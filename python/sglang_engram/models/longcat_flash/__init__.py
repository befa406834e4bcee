"""LongCat-Flash's n-gram embedding: known, and left to upstream SGLang (``family``)."""

__all__ = ["family"]
