"""Upstream SGLang's CPU Engram functions: the bit-exact oracle for our library.

Imported only by tests; importing sglang takes a while, so it happens once per session.
"""

from __future__ import annotations

import functools
from types import ModuleType


@functools.cache
def upstream_engram() -> ModuleType:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sglang.srt.layers import engram
    return engram
