"""A served layer's Engram table: :func:`~sglang_engram.tables.opening.open_layer_table`
(the one way both models open one, in the ``--engram-offload`` placement), the SSD
table directories of a checkpoint, the registry of the tables this process serves (read
by the metrics and the read-ahead), and the weight filter that keeps table tensors out
of SGLang's loader when the placement reads none of them.
"""

__all__ = ["opening", "served", "ssd_dirs", "weight_filter"]
