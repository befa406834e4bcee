"""The ``--engram-*`` server arguments: the flags (one list, added to SGLang's parser),
the resolved :class:`~sglang_engram.args.server_config.EngramServerConfig` carried on
``ServerArgs`` and to the schedulers, the checks run before any weight loads, and the
served checkpoint's ``config.json`` facts, read once per process.
"""

__all__ = ["flags", "model_facts", "server_config", "startup_checks"]
