"""What the families' forward passes share: lookups started on a side stream
(``side_stream``), failed lookups recorded for the batch's requests
(``lookup_failures``), and the CUDA-graph breaks around a lookup (``graph_breaks``).
"""

__all__ = ["graph_breaks", "lookup_failures", "side_stream"]
