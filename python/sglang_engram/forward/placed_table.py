"""Who serves a family's table, upstream's class or ours, and a TP shard's lookup: what
DeepSeek-V4.1's and Qwen3.8-Flash-Next's placed tables share.

Each of those families' hooks replaces the name SGLang builds a table by (an upstream
class) with a subclass of that class and of :class:`PlacedTable`. The choice is made
in ``__new__``: where the family declares the placement upstream's
(``ModelFamily.upstream_serves``), upstream's class is built by its own constructor;
elsewhere ours, whose rows live in a core-library table (or nowhere, for ``off``).

TP sharding is upstream's: a rank holds the rows ``[row_start, row_start + rows)`` of the
layer's table, looks up every id, zero-fills the ids it does not own
(:func:`owned_rows`), and upstream's all-reduce sums the ranks' rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import torch

from engram.ssd.directory import shard_name
from engram.tables import EngramTable
from sglang_engram.forward import graph_breaks, lookup_failures
from sglang_engram.protocol.family import ModelFamily
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.protocol.server_config import EngramServerConfig
from sglang_engram.tables.opening import open_layer_table

logger = logging.getLogger(__name__)

# a shard's rows of its own row ids, given which of them it owns (``EngramTable.lookup``)
RowLookup = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def owned_rows(
    lookup: RowLookup, ids: torch.Tensor, row_start: int, rows: int, out: torch.Tensor
) -> None:
    """``out`` = the rows of table-wide ``ids`` that the shard of rows
    ``[row_start, row_start + rows)`` holds (``lookup``: by row of the shard), zeros for
    the ids it does not own: this rank's share of upstream's all-reduce."""
    local = ids.long() - row_start
    owned = (local >= 0) & (local < rows)
    # NOTE: ids the shard does not own read its row 0, as upstream's masked gather does:
    # the shapes stay the ids', and ``owned`` keeps them out of the table's counts.
    found = lookup(local.masked_fill(~owned, 0), owned)
    out.copy_(found.masked_fill(~owned.unsqueeze(-1), 0))


class PlacedTable:
    """Mixed into a family's subclass of upstream's table class, after it (so that the
    subclass's ``__base__`` is upstream's class, which ``__new__`` builds).

    Ours set, in ``__init__``: ``config``, ``layer_id``, ``row_start``, ``rows`` (this
    rank's shard) and ``table`` (``None``: no rows held, its lookups are zeros)."""

    # NOTE: bound by the hook that hands the class to SGLang: SGLang builds the class
    # with upstream's arguments.
    runtime: ClassVar[EngramRuntime]
    family: ClassVar[ModelFamily]
    config: EngramServerConfig
    layer_id: int
    row_start: int
    rows: int
    tp_size: int
    table: EngramTable | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        upstream = cls.__base__
        # NOTE: only the class the hook hands over picks (its base is upstream's class).
        if not issubclass(upstream, PlacedTable) and cls.upstream_builds():
            # NOTE: not an instance of cls, so Python skips our __init__. The base is
            # read from the class: the hook rebinds upstream's module-level name to us.
            return cls.build_upstream(upstream, *args, **kwargs)
        return super().__new__(cls)

    @classmethod
    def upstream_builds(cls) -> bool:
        """Whether upstream's class serves this construction: the family declares the
        placement upstream's."""
        return cls.family.served_by_upstream(cls.runtime.serving_config()) is not None

    @classmethod
    def build_upstream(cls, upstream: type, *args: Any, **kwargs: Any) -> Any:
        """Upstream's class, built by its own constructor."""
        return upstream(*args, **kwargs)

    @property
    def placement(self) -> str:
        return self.config.offload

    @property
    def is_off(self) -> bool:
        """Whether the layer adds nothing (its family's forward hook passes through)."""
        return not self.config.placement.holds_table

    def open_table(
        self,
        head_dim: int,
        device: torch.device,
        weight: torch.Tensor | None = None,
        scale: torch.Tensor | None = None,
    ) -> EngramTable:
        """This rank's shard of the layer's table in the placement (``weight`` and
        ``scale``: rows loaded from the checkpoint, which the table adopts)."""
        from sglang.srt.runtime_context import get_parallel

        return open_layer_table(
            self.runtime,
            self.config,
            self.family,
            self.layer_id,
            rows=(self.row_start, self.row_start + self.rows),
            head_dim=head_dim,
            device=device,
            weight=weight,
            scale=scale,
            shard=shard_name(get_parallel().tp_rank, self.tp_size),
        )

    def lookup_owned(self, ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out``, filled with the rows of table-wide ``ids`` this shard holds and zeros
        for the others."""
        if self.table is None:
            return out.zero_()
        # NOTE: an eager break of SGLang's breakable CUDA graphs: every replay reads the
        # live batch's rows into ``out``, which the rest of the graph reads.
        graph_breaks.owned_rows_into(self, ids, out)
        return out

    def fill_owned_rows(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        """The break's body: :func:`owned_rows` on this shard's table, a failed read
        contained to its batch (``lookup_failures``)."""
        assert self.table is not None, f"layer {self.layer_id}: no table"
        lookup = partial(lookup_failures.lookup, self.runtime.failures, self.table)
        owned_rows(lookup, ids, self.row_start, self.rows, out)

    def log_table(self, what: str) -> None:
        """The start-up log line of the table: where, served by which code, memory held."""
        logger.info(
            "sglang-engram: %s in %s: %s, %s",
            what,
            self.placement,
            self.family.implementation(self.config),
            self.table.memory() if self.table is not None else "nothing held",
        )
