"""DeepSeek-V4.1's Engram layers on upstream SGLang's model: upstream's own
``EngramEmbedding`` for ``hbm`` and ``dram`` (counted for the metrics), ours for
``ssd``, ``off`` and the hot cache (``layers``, ``upstream_embedding``).
"""

__all__ = ["layers", "upstream_embedding"]
