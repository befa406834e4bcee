"""What every other part of the plugin builds on, importing nothing of them: the
:class:`~sglang_engram.protocol.family.ModelFamily` interface and the registry of
families (by import path), the hook record, the server config and the served
checkpoint's facts, a request's limits, the row hasher and served-table interfaces, and
the per-process runtime state (:mod:`~sglang_engram.protocol.runtime`).

Imports run one way through the plugin: ``protocol`` -> ``tables`` and ``forward``
(what the families' layers share) -> ``models`` (the families) -> ``args``,
``read_ahead``, ``metrics`` and ``integration`` (SGLang's hooks) -> ``cluster``,
``compare`` and ``doctor`` (the tools). ``test/core/test_layering.py`` checks it.
"""
