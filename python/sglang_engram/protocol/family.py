"""A model family: one kind of n-gram-table model SGLang serves, and what the plugin's
shared modules ask of it.

Each family is one folder under ``models/`` whose ``family.py`` defines a
:class:`ModelFamily` subclass, listed in :mod:`sglang_engram.protocol.registry`. The
shared modules (flags and start-up checks, table opening and SSD directories, the
weight filter, the read-ahead, ``doctor``, the metrics) ask the family of the served
checkpoint instead of branching on its model type. A family module imports neither
torch nor SGLang at import time: ``register()`` reads its hooks.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sglang_engram.protocol.cpu_engine import cpu_engine_on
from sglang_engram.protocol.hook import Hook
from sglang_engram.protocol.request_limits import RequestLimits

if TYPE_CHECKING:
    from sglang_engram.protocol.row_hasher import RowHasher
    from sglang_engram.protocol.server_config import EngramServerConfig

HfConfig = Mapping[str, Any]

# which code serves a family's tables (start-up log, doctor)
OUR_TABLES = "sglang-engram's tables"


@dataclass(frozen=True)
class TableShard:
    """One table directory a TP rank serves from under ``--engram-ssd-dir``: layer
    ``layer_id``'s rows ``rows`` (``None``: all of them), directory suffix ``shard``."""

    layer_id: int
    rows: tuple[int, int] | None
    shard: str = ""


@dataclass(frozen=True)
class UpstreamServes:
    """A placement whose tables upstream SGLang's own class serves for a family: the
    plugin builds upstream's class there instead of ours (``forward/placed_table.py``).
    ``how``: how it holds the rows, for the start-up log and ``doctor``
    (``on_cpu_engine``: the same on SGLang's CPU engine, where it differs)."""

    placement: str
    how: str
    on_cpu_engine: str | None = None
    # NOTE: True where only our tables have what ``--engram-hot-cache-gb`` asks for:
    # with a hot cache asked for, ours serve the placement instead.
    not_with_hot_cache: bool = False

    def serves(self, config: EngramServerConfig) -> bool:
        """Whether upstream's class serves ``config``'s tables."""
        wanted = config.offload == self.placement
        return wanted and not (self.not_with_hot_cache and config.hot_cache_gb)


class ModelFamily(ABC):
    """What the plugin knows of one family of n-gram-table models."""

    name: ClassVar[str]
    # how users know the family, and what its tables are called
    title: ClassVar[str]
    tables: ClassVar[str]
    # NOTE: False for a family SGLang serves whose tables the plugin leaves to upstream
    # (doctor says so; --engram-* flags are ignored with a warning).
    served: ClassVar[bool] = True
    # our own model classes registered into SGLang's ModelRegistry: name -> module
    architectures: ClassVar[Mapping[str, str]] = {}
    hooks: ClassVar[tuple[Hook, ...]] = ()
    # checkpoint tensors holding table rows, which the weight filter can leave unread;
    # the ``layer`` group is the layer id the table directories are named by
    table_tensor: ClassVar[re.Pattern[str] | None] = None
    # the name of the checkpoint format its tables are stored in
    # (``engram.ssd.checkpoint_formats.CHECKPOINT_FORMATS``: what the ssd placement
    # converts from); None: the plugin converts none of its tables
    checkpoint_format: ClassVar[str | None] = None
    # NOTE: True where the family's forward pass runs the core library's tables (host
    # counters, our side stream): CUDA graphs would not replay them, whatever the
    # placement, unless the user asks for graphs.
    eager: ClassVar[bool] = False
    # which placements upstream SGLang's own table class serves, as data; ours serve the
    # others (where the family has an upstream class to replace)
    upstream_serves: ClassVar[tuple[UpstreamServes, ...]] = ()

    @abstractmethod
    def matches(self, hf_config: HfConfig) -> bool:
        """Whether a checkpoint's ``config.json`` is of this family."""

    @abstractmethod
    def table_layers(self, hf_config: HfConfig | None) -> tuple[int, ...]:
        """Layer ids of the tables, as their directories are named (``None``: the
        released model's, when there is no local config to read)."""

    @abstractmethod
    def request_limits(self, hf_config: HfConfig) -> RequestLimits:
        """What every request must satisfy for this family's layers (the request guard
        refuses the rest with a 400); raises ``EngramConfigError`` where the config
        cannot say."""

    def served_by_upstream(self, config: EngramServerConfig) -> UpstreamServes | None:
        """The declaration by which upstream's class serves ``config``'s tables, else
        ``None`` (ours serve them)."""
        return next((entry for entry in self.upstream_serves if entry.serves(config)), None)

    def implementation(self, config: EngramServerConfig) -> str:
        """Which code serves the tables in ``config.offload``."""
        entry = self.served_by_upstream(config)
        if entry is None:
            return OUR_TABLES
        if entry.on_cpu_engine is not None and cpu_engine_on():
            return entry.on_cpu_engine
        return entry.how

    def check_config(self, hf_config: HfConfig, config: EngramServerConfig) -> None:  # noqa: B027
        """Raise ``EngramConfigError`` for a config this placement cannot serve."""

    def table_shards(self, hf_config: HfConfig, tp_size: int) -> list[TableShard]:
        """Every table directory of the ssd placement at ``tp_size`` (each rank's
        share when the family shards its tables over TP)."""
        return [TableShard(layer, None) for layer in self.table_layers(hf_config)]

    def configure_server(
        self, server_args: Any, config: EngramServerConfig
    ) -> tuple[EngramServerConfig, list[str]]:
        """Set SGLang's own options that realise ``config.offload`` for this family
        (only where the user set nothing). Returns the config to serve with (a family
        whose own upstream flag the user set alone may derive the placement from it)
        and what changed, for the log; raises ``EngramConfigError`` for flags that
        contradict each other."""
        return config, []

    def row_hasher(self, model: Any) -> RowHasher | None:
        """The hash the SSD read-ahead runs in the scheduler, built from the constants
        ``model`` (as SGLang loaded it) holds; ``None``: nothing of this family is read
        ahead. Asked once the model is loaded, with ``ssd`` tables and read-ahead on (``--engram-prefetch``)."""
        return None

    def table_tensor_layer(self, name: str) -> int | None:
        """The layer of a checkpoint tensor that holds table rows, else ``None``."""
        if self.table_tensor is None:
            return None
        match = self.table_tensor.search(name)
        return int(match.group("layer")) if match else None

    def disk_bytes(self, hf_config: HfConfig, shard: TableShard) -> int:
        """Bytes one table directory's data file takes on disk, from the config alone
        (the start-up check of a checkpoint without table files to compare)."""
        raise NotImplementedError(f"{self.title}: the plugin does not serve its tables")
