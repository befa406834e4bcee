"""Qwen3.8-Flash-Next's PLE n-gram table in the ``--engram-offload`` placement.

Upstream's ``Qwen4ExpNGramEmbedding`` builds its table as a ``VocabParallelEmbedding``
(``hbm``), or wraps one built on the meta device in ``Qwen4ExpPinnedHostEmbedding``
(``dram``, chosen by ``--ple-offload-embedding``: ``family.configure_server``). The plugin
replaces the name ``VocabParallelEmbedding`` in upstream's module with
:class:`PlacedPleTable`, which hands back upstream's own class (``placed_table``) for
every embedding but a PLE table in a placement the family does not declare upstream's
(``Qwen4Exp.upstream_serves``: ``ssd`` and ``off``): those are built on the meta device
(nothing allocated) and read rows from a core-library table (``ssd``: files under
``--engram-ssd-dir``, converted from the checkpoint's 512 shards on first start) or none
(``off``: the layer adds nothing, :func:`add_ple_embedding`). Their tensors, the
per-table ``weight_scale`` included, are left unread by the weight filter: the ssd table
applies the scale itself, so upstream's ``* weight_scale`` multiplies by its unloaded 1.

TP sharding is upstream's: a rank holds ``shard_indices``' rows, zero-fills the ids it
does not own (its ``_embed_local_shard``: ``placed_table.owned_rows``), and upstream's
own ``forward`` all-reduces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from sglang.srt.layers.vocab_parallel_embedding import VocabParallelEmbedding
from torch import nn

from engram.tables import EngramTable
from sglang_engram.forward.placed_table import PlacedTable
from sglang_engram.models.qwen4_exp.family import Qwen4Exp
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.tables import weight_filter

# NOTE: the decoder layer whose PLE table upstream's constructor is building (set by
# the AROUND hook on Qwen4ExpNGramEmbedding.__init__); None for every other embedding.
_BUILDING: ContextVar[int | None] = ContextVar("sglang_engram_ple_layer", default=None)


class PlacedPleTable(VocabParallelEmbedding, PlacedTable):
    """One PLE layer's table (this TP rank's rows) in ``ssd`` or ``off``."""

    family = Qwen4Exp()

    @classmethod
    def upstream_builds(cls) -> bool:
        # NOTE: the hook replaces the name for every embedding of upstream's module; only
        # a PLE table (built inside Qwen4ExpNGramEmbedding) is ever ours.
        return _BUILDING.get() is None or super().upstream_builds()

    def __init__(self, num_embeddings: int, embedding_dim: int, **kwargs: Any):
        device = torch.device(torch.get_default_device())
        # NOTE: upstream's constructor sets the shard range and everything its forward
        # and the loader read; on the meta device its rows allocate nothing.
        with torch.device("meta"):
            super().__init__(num_embeddings, embedding_dim, **kwargs)
        self.config = self.runtime.serving_config()
        layer_id = _BUILDING.get()
        assert layer_id is not None, "built inside Qwen4ExpNGramEmbedding only"
        self.layer_id = layer_id
        self.row_start = self.shard_indices.org_vocab_start_index
        self.rows = self.shard_indices.org_vocab_end_index - self.row_start
        self.weight = nn.Parameter(
            torch.empty(0, embedding_dim, dtype=self.weight.dtype, device=device),
            requires_grad=False,
        )
        # NOTE: no quantisation method to run after loading: the rows are not loaded here.
        self.quant_method = None
        weight_filter.skip_tables(self.runtime.skips, layers={self.layer_id})
        self.table: EngramTable | None = None
        if self.config.placement.files and self.rows:
            self.table = self.open_table(embedding_dim, device)
        self.log_table(f"layer {self.layer_id} PLE table")

    def _embed_local_shard(self, input_: torch.Tensor) -> torch.Tensor:
        """This rank's rows of ``input_`` (table-wide ids): its table's for the ids it
        owns, zeros for the rest (upstream's ``forward`` then runs its all-reduce)."""
        out = torch.empty(
            (*input_.shape, self.embedding_dim), dtype=torch.bfloat16, device=input_.device
        )
        return self.lookup_owned(input_, out)


@contextmanager
def building(layer_id: int) -> Iterator[None]:
    token = _BUILDING.set(layer_id)
    try:
        yield
    finally:
        _BUILDING.reset(token)


def around_ngram_embedding_init(
    original: Callable[..., None],
    self: nn.Module,
    config: Any,
    embedding_dim: int,
    ple_layer_index: int = 0,
    *args: Any,
    **kwargs: Any,
) -> None:
    """AROUND ``Qwen4ExpNGramEmbedding.__init__``: names the decoder layer whose table
    is being built (``ple_layer_ids`` are 1-based) for :class:`PlacedPleTable`."""
    layer_id = sorted({int(i) for i in config.ple_layer_ids})[ple_layer_index] - 1
    with building(layer_id):
        original(self, config, embedding_dim, ple_layer_index, *args, **kwargs)


def add_ple_embedding(
    original: Callable[..., torch.Tensor], self: nn.Module, residual: torch.Tensor
) -> torch.Tensor:
    """AROUND the decoder layer's ``_add_ple_embedding``: with the table off the PLE
    layer adds nothing and the residual passes unchanged."""
    table = self.ple.ple_embedding.ngram_embedding
    if isinstance(table, PlacedPleTable) and table.is_off:
        return residual
    return original(self, residual)


def placed_ple_table(runtime: EngramRuntime) -> type[PlacedPleTable]:
    """The class that replaces ``VocabParallelEmbedding`` in upstream's module, bound to
    ``runtime``."""
    PlacedPleTable.runtime = runtime
    return PlacedPleTable
