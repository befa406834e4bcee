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

from sglang_engram.runtime import get_runtime

logger = logging.getLogger(__name__)

Callback = Callable[[ModuleType], None]


def when_imported(module_name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``module_name`` has executed (now if it has).

    A module still executing counts as not imported yet; its callbacks run when it
    finishes only if it was :func:`watch`-ed before its import began."""
    state = get_runtime().imports
    with state.lock:
        module = sys.modules.get(module_name)
        if module is None or initializing(module_name):
            state.callbacks.setdefault(module_name, []).append(callback)
            _install_finder()
            return
    _fire(callback, module)


def watch(module_name: str) -> None:
    """Make sure callbacks can still be queued for ``module_name`` while it executes
    (its loader is wrapped when it is imported)."""
    state = get_runtime().imports
    with state.lock:
        if module_name not in sys.modules:
            state.callbacks.setdefault(module_name, [])
            _install_finder()


def initializing(module_name: str) -> bool:
    """Whether ``module_name`` is in the middle of executing (a circular import)."""
    if module_name in get_runtime().imports.executed:
        return False
    spec = getattr(sys.modules.get(module_name), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def pending() -> list[str]:
    """Modules whose callbacks have not run yet in this process."""
    state = get_runtime().imports
    with state.lock:
        return sorted(name for name, cbs in state.callbacks.items() if cbs)


def _fire(callback: Callback, module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:  # noqa: BLE001 - a broken hook must not break the import
        logger.exception("sglang-engram: callback for %s failed", module.__name__)


def _run_callbacks(module: ModuleType) -> None:
    state = get_runtime().imports
    with state.lock:
        state.executed.add(module.__name__)
        callbacks = state.callbacks.pop(module.__name__, [])
    for callback in callbacks:
        _fire(callback, module)


class _NotifyingLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the module's callbacks."""

    def __init__(self, inner: Any):
        self._inner = inner

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _run_callbacks(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._resolving: set[str] = set()

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname not in get_runtime().imports.callbacks or fullname in self._resolving:
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
        spec.loader = _NotifyingLoader(spec.loader)
        return spec


def _install_finder() -> None:
    """Put our finder first on ``sys.meta_path`` (once per process; the caller holds the
    import state's lock)."""
    state = get_runtime().imports
    if state.finder is None:
        state.finder = _PostImportFinder()
        sys.meta_path.insert(0, state.finder)
