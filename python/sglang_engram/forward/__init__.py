"""What the families' forward passes share: lookups started on a side stream
(``side_stream``), failed lookups recorded for the batch's requests
(``lookup_failures``), the CUDA-graph breaks around a lookup (``graph_breaks``), and
who serves a table, upstream's class or ours, with a TP shard's lookup
(``placed_table``).
"""

__all__ = ["graph_breaks", "lookup_failures", "placed_table", "side_stream"]
