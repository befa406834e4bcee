"""Run a callback right after a given module is first imported.

SGLang's ``HookRegistry.apply_hooks`` imports every target module at once, in every
process (launcher, tokenizer, detokenizer). Our targets include the model registry
and the Engram layers, which are heavy; so each hook is handed to SGLang only when
its module is imported anyway (or at once if it already is).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sglang_engram.protocol.runtime import ImportState

logger = logging.getLogger(__name__)

Callback = Callable[[ModuleType], None]


def when_imported(state: ImportState, module_name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``module_name`` has executed (now if it has).

    A module still executing counts as not imported yet; its callbacks run when it
    finishes only if it was :func:`watch`-ed before its import began."""
    with state.lock:
        module = sys.modules.get(module_name)
        if module is None or initializing(state, module_name):
            state.callbacks.setdefault(module_name, []).append(callback)
            _install_finder(state)
            return
    _fire(callback, module)


def watch(state: ImportState, module_name: str) -> None:
    """Make sure callbacks can still be queued for ``module_name`` while it executes
    (its loader is wrapped when it is imported)."""
    with state.lock:
        if module_name not in sys.modules:
            state.callbacks.setdefault(module_name, [])
            _install_finder(state)


def initializing(state: ImportState, module_name: str) -> bool:
    """Whether ``module_name`` is in the middle of executing (a circular import)."""
    if module_name in state.executed:
        return False
    spec = getattr(sys.modules.get(module_name), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def pending(state: ImportState) -> list[str]:
    """Modules whose callbacks have not run yet in this process."""
    with state.lock:
        return sorted(name for name, cbs in state.callbacks.items() if cbs)


def _fire(callback: Callback, module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:  # noqa: BLE001 - a broken hook must not break the import
        logger.exception("sglang-engram: callback for %s failed", module.__name__)


def _run_callbacks(state: ImportState, module: ModuleType) -> None:
    with state.lock:
        state.executed.add(module.__name__)
        callbacks = state.callbacks.pop(module.__name__, [])
    for callback in callbacks:
        _fire(callback, module)


class _NotifyingLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the module's callbacks."""

    def __init__(self, state: ImportState, inner: Any):
        self._state = state
        self._inner = inner

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _run_callbacks(self._state, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self, state: ImportState) -> None:
        self._state = state
        self._resolving: set[str] = set()

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname not in self._state.callbacks or fullname in self._resolving:
            return None
        # NOTE: find the real spec through the remaining finders, then wrap its loader;
        # _resolving stops this finder from answering its own recursive query.
        self._resolving.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._resolving.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _NotifyingLoader(self._state, spec.loader)
        return spec


def _install_finder(state: ImportState) -> None:
    """Put our finder first on ``sys.meta_path`` (once per process; the caller holds the
    import state's lock)."""
    if state.finder is None:
        state.finder = _PostImportFinder(state)
        sys.meta_path.insert(0, state.finder)
