"""One place the plugin touches SGLang, as data: a :class:`Hook`.

A hook names an upstream module, an attribute path inside it, our function (as
``"module:name"``, imported only when the upstream module is) and how it is applied:
one of SGLang's ``HookType`` names, or ``CALL`` for a registration that runs our
function once with the upstream module. A hook whose function needs this process's
state (``with_runtime``) names a maker instead: called with the
:class:`~sglang_engram.protocol.runtime.EngramRuntime`, it returns the function (or
class) applied; a ``CALL`` hook's function is then called with the runtime. The shared hooks are in
:mod:`sglang_engram.integration.hooks`; a model family declares its own
(:mod:`sglang_engram.protocol.family`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

CALL = "CALL"


@dataclass(frozen=True)
class Hook:
    module: str
    attr: str
    ours: str
    kind: str
    why: str
    with_runtime: bool = False

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attr}"

    def resolve_target(self) -> Any:
        """The upstream object (imports its module); raises if it does not exist."""
        obj: Any = importlib.import_module(self.module)
        for part in self.attr.split("."):
            obj = getattr(obj, part)
        return obj

    @property
    def ours_module(self) -> str:
        return self.ours.partition(":")[0]

    def resolve_ours(self) -> Any:
        module, _, name = self.ours.partition(":")
        return getattr(importlib.import_module(module), name)
