"""The ``--engram-*`` server arguments: the flags (one list, added to SGLang's parser),
resolved into a :class:`~sglang_engram.protocol.server_config.EngramServerConfig`, the
checks run before any weight loads, and the CUDA-graph policy.
"""

__all__ = ["flags", "graph_policy", "startup_checks"]
