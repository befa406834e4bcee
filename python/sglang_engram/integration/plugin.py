"""``register()``: the ``sglang.srt.plugins`` entry point.

SGLang's ``load_plugins()`` calls it early in every process. It is cheap (it imports
no SGLang module), idempotent (a second call does nothing) and failure-tolerant:
each hook is applied on its own, and a hook that cannot apply is logged with the
reason and recorded for ``python -m sglang_engram doctor`` instead of raising.
"""

from __future__ import annotations

import logging

from sglang_engram.integration import import_watch, kernel_standin
from sglang_engram.integration.hooks import CALL, HOOKS, Hook
from sglang_engram.integration.version_pin import version_problem
from sglang_engram.protocol.runtime import EngramRuntime, HookState, get_runtime

logger = logging.getLogger(__name__)

PLUGIN_NAME = "engram"
DIST_NAME = "sglang-engram"


def register() -> None:
    """Arrange for every hook in :data:`HOOKS` to apply when its module is imported.

    NOTE: the one place a serving process takes its runtime: every hook that needs it
    is handed it from here (``Hook.with_runtime``)."""
    runtime = get_runtime()
    state = runtime.hooks
    with state.lock:
        if state.registered:
            return
        state.registered = True
    problem = version_problem()
    if problem:
        logger.warning("sglang-engram: %s", problem)
    try:
        # NOTE: before any hook: SGLang's first import of sgl_kernel follows this call.
        kernel_standin.install_if_needed(runtime)
    except Exception as exc:  # noqa: BLE001 - never take SGLang down
        logger.error("sglang-engram: could not check sgl_kernel: %s: %s", type(exc).__name__, exc)
    for hook in HOOKS:
        try:
            _record(state, hook, "pending")
            import_watch.watch(runtime.imports, hook.ours_module)
            import_watch.when_imported(
                runtime.imports, hook.module, lambda _m, h=hook: apply_hook(runtime, h)
            )
        except Exception as exc:  # noqa: BLE001 - never take SGLang down
            _failed(state, hook, exc)


def apply_hook(runtime: EngramRuntime, hook: Hook) -> bool:
    """Apply one hook now (its module is imported); record and log the outcome."""
    if import_watch.initializing(runtime.imports, hook.ours_module):
        # NOTE: our module imported the upstream one and is still executing (e.g.
        # ``import sglang_engram.models.deepseek_v41.layers`` came first): its names do
        # not exist yet, so the hook applies once it has finished (register() watched it
        # for this).
        import_watch.when_imported(
            runtime.imports, hook.ours_module, lambda _m: apply_hook(runtime, hook)
        )
        return False
    try:
        hook.resolve_target()
        ours = hook.resolve_ours()
        if hook.kind == CALL:
            ours(runtime) if hook.with_runtime else ours()
        else:
            if hook.with_runtime:
                ours = ours(runtime)
            from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, HookType

            HookRegistry.register(
                hook.target,
                ours,
                HookType[hook.kind],
                source=HookSource(plugin_name=PLUGIN_NAME, dist_name=DIST_NAME),
            )
            HookRegistry.apply_hooks()
            if hook.target not in HookRegistry._patched:
                raise RuntimeError("SGLang's HookRegistry did not apply it (see log above)")
    except Exception as exc:  # noqa: BLE001 - logged and recorded, never raised
        _failed(runtime.hooks, hook, exc)
        return False
    _record(runtime.hooks, hook, "applied")
    logger.debug("sglang-engram: applied %s hook on %s", hook.kind, hook.target)
    return True


def hook_status(state: HookState) -> dict[str, str]:
    """Each registered hook's target -> ``"pending"``, ``"applied"`` or ``"failed: <reason>"``."""
    with state.lock:
        return dict(state.status)


def _record(state: HookState, hook: Hook, outcome: str) -> None:
    with state.lock:
        state.status[hook.target] = outcome


def _failed(state: HookState, hook: Hook, exc: BaseException) -> None:
    _record(state, hook, f"failed: {type(exc).__name__}: {exc}")
    logger.error(
        "sglang-engram: could not hook %s (%s): %s: %s; that feature is unavailable",
        hook.target,
        hook.why,
        type(exc).__name__,
        exc,
    )
