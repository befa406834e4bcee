"""Everything the plugin remembers in one process: the :class:`EngramRuntime`.

Every SGLang process that loads the plugin (launcher, scheduler, tokenizer) has one,
returned by :func:`get_runtime`. The plugin's modules hold no mutable state of their
own: their functions read and write the fields below, each guarded by the lock next
to it. This module imports neither torch nor SGLang (``register()`` reaches it).

Two kinds of state:

- **the process**: what registration did to this interpreter (each hook's status, the
  import watch on ``sys.meta_path``, which ``sgl_kernel`` is used, whether the served
  profiles' exit writes are set up). :meth:`EngramRuntime.reset` keeps it: SGLang's
  classes stay patched and the finder stays installed whatever is forgotten here.
- **serving**: what serving resolved and built (the server config, the model facts read
  from ``config.json``, the served tables and hasher, the weight filter's skips, failed
  lookups, the read-ahead's decode handles, the served-profile writers, the metrics
  exporter). :meth:`EngramRuntime.reset` starts it over, as a fresh process would
  (tests call it between cases).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from sglang_engram.protocol.model_facts import ModelFacts, read_model_facts
from sglang_engram.protocol.server_config import EngramServerConfig, config_from_sglang

if TYPE_CHECKING:
    from engram.profile.upkeep import ProfileUpkeep
    from engram.rows.read_ahead import ReadAheadHandle
    from sglang_engram.protocol.row_hasher import RowHasher
    from sglang_engram.protocol.served_table import ServedTable


# ---- what the layers above keep here, as far as the runtime uses it ---------------------


class KernelChoice(Protocol):
    """``integration.kernel_standin``'s answer: which ``sgl_kernel`` this process uses."""

    standin: bool

    def describe(self) -> str: ...


class Closable(Protocol):
    """``read_ahead.overlap``'s reader: closed when serving starts over."""

    def close(self) -> None: ...


class Stoppable(Protocol):
    """``metrics.exporter``'s thread: stopped when serving starts over."""

    def stop(self) -> None: ...


# ---- the process (kept by reset) ----------------------------------------------------------


@dataclass
class HookState:
    """``integration.plugin``: whether ``register()`` ran, and each hook's outcome."""

    registered: bool = False
    # target -> "pending" | "applied" | "failed: <reason>"
    status: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class ImportState:
    """``integration.import_watch``: callbacks waiting for a module's first import."""

    callbacks: dict[str, list[Callable[[ModuleType], None]]] = field(default_factory=dict)
    # NOTE: modules whose code has run through our loader; importlib still marks them
    # initializing while their callbacks run.
    executed: set[str] = field(default_factory=set)
    # the finder on sys.meta_path (installed once, on the first watched module)
    finder: Any = None
    lock: threading.RLock = field(default_factory=threading.RLock)


# ---- serving (reset starts it over) ------------------------------------------------------


@dataclass
class TableState:
    """``tables.served``: the tables this process serves and the served model's hasher."""

    entries: list[ServedTable] = field(default_factory=list)
    hasher: RowHasher | None = None
    # ``tables.ssd_dirs``: a checkpoint's tables found once while its files stay the same
    # (keyed by path, format and the files' names, sizes and mtimes; the check asks per layer)
    checkpoints: dict[tuple[str, str | None, tuple[tuple[str, int, int], ...]], dict[int, Any]] = (
        field(default_factory=dict)
    )
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class SkipState:
    """``tables.weight_filter``: the table tensors the checkpoint loader leaves unread."""

    all_tables: bool = False
    layers: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class FailureState:
    """``forward.lookup_failures``: lookups that failed since the last batch ended."""

    messages: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class ReadAheadState:
    """``read_ahead.ssd``: the live decode-step handle of each table;
    ``read_ahead.overlap``: its reader (under the overlap scheduler)."""

    # NOTE: id(table) -> its handle: one per table, the next step's replaces it.
    decode_handles: dict[int, ReadAheadHandle] = field(default_factory=dict)
    overlap: Closable | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class ProfileOutState:
    """``tables.profile_out``: the writer of each ``--engram-profile-out`` file of this
    process (its tables' tallies feed it)."""

    upkeeps: dict[Path, ProfileUpkeep] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class EngramRuntime:
    """The plugin's state in this process (see the module docstring)."""

    hooks: HookState = field(default_factory=HookState)
    imports: ImportState = field(default_factory=ImportState)
    kernel: KernelChoice | None = None
    # ``tables.profile_out``: its writes at interpreter exit and on SIGTERM are set up
    exit_writes: bool = False

    # ``protocol.server_config``: the config this process serves with (resolved on first use)
    config: EngramServerConfig | None = None
    # ``protocol.model_facts``: the served checkpoint's config.json, and how often it was read
    model: ModelFacts | None = None
    config_json_reads: int = 0
    tables: TableState = field(default_factory=TableState)
    skips: SkipState = field(default_factory=SkipState)
    failures: FailureState = field(default_factory=FailureState)
    read_ahead: ReadAheadState = field(default_factory=ReadAheadState)
    profile_out: ProfileOutState = field(default_factory=ProfileOutState)
    # ``metrics.exporter``: the exporter thread, once SGLang exports metrics
    metrics: Stoppable | None = None
    # guards config, model, config_json_reads and metrics
    lock: threading.RLock = field(default_factory=threading.RLock)

    def serving_config(self) -> EngramServerConfig:
        """The config this process serves with: the one :meth:`use_config` set (the
        launcher, once its flags are parsed), else what SGLang published, resolved on
        the first call (:func:`~sglang_engram.protocol.server_config.config_from_sglang`)."""
        with self.lock:
            if self.config is None:
                self.config = config_from_sglang()
            return self.config

    def use_config(self, config: EngramServerConfig) -> None:
        """Serve this process with ``config``."""
        with self.lock:
            self.config = config

    def model_facts(self, model_path: str | None) -> ModelFacts:
        """The facts of ``model_path``, read from its ``config.json`` on the first call and
        held; a call for another path reads that one instead (see
        :func:`~sglang_engram.protocol.model_facts.read_model_facts` for the errors)."""
        key = os.path.realpath(model_path) if model_path else None
        with self.lock:
            if self.model is None or self.model.path != key:
                facts = read_model_facts(key)
                self.config_json_reads += facts.hf_config is not None
                self.model = facts
            return self.model

    def reset(self) -> None:
        """Forget everything serving resolved and built, as a fresh process would start:
        the read-ahead's handles are released, the served profiles written and closed and
        the metrics thread stops. What
        registration did to this process stays (see the module docstring).

        NOTE: the serving states are replaced, not emptied: what is handed the runtime
        keeps the runtime and reads its fields when it uses them."""
        with self.lock:
            handles, metrics, profiles = self.read_ahead, self.metrics, self.profile_out
            self.config = self.model = self.metrics = None
            self.config_json_reads = 0
            self.tables = TableState()
            self.skips = SkipState()
            self.failures = FailureState()
            self.read_ahead = ReadAheadState()
            self.profile_out = ProfileOutState()
        with handles.lock:
            released = list(handles.decode_handles.values())
            handles.decode_handles.clear()
            if handles.overlap is not None:
                handles.overlap.close()
        for handle in released:
            handle.release()
        if metrics is not None:
            metrics.stop()
        with profiles.lock:
            upkeeps = list(profiles.upkeeps.values())
        for upkeep in upkeeps:
            upkeep.close()


_RUNTIME = EngramRuntime()


def get_runtime() -> EngramRuntime:
    """This process's runtime (one object for the life of the process; ``reset()``
    clears it in place)."""
    return _RUNTIME
