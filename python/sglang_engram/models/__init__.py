"""The model families the plugin serves, one folder each: its ``family.py`` (the
:class:`~sglang_engram.protocol.family.ModelFamily` the shared modules ask) and the
layers its hooks put into SGLang. :mod:`sglang_engram.protocol.registry` lists them."""
