"""Qwen3.8-Flash-Next's PLE n-gram table in the ``--engram-offload`` placement.

Upstream's ``Qwen4ExpNGramEmbedding`` builds its table as a ``VocabParallelEmbedding``
(``hbm``), or wraps one built on the meta device in ``Qwen4ExpPinnedHostEmbedding``
(``dram``, chosen by ``--ple-offload-embedding``: ``family.configure_server``). The plugin
replaces the name ``VocabParallelEmbedding`` in upstream's module with
:class:`PlacedPleTable`, which hands back upstream's own class for every embedding but a
PLE table in ``ssd`` or ``off``: those are built on the meta device (nothing allocated)
and read rows from a core-library table (``ssd``: files under ``--engram-ssd-dir``,
converted from the checkpoint's 512 shards on first start) or none (``off``: the layer
adds nothing, :func:`add_ple_embedding`). Their tensors, the per-table ``weight_scale``
included, are left unread by the weight filter: the ssd table applies the scale itself,
so upstream's ``* weight_scale`` multiplies by its unloaded 1.

TP sharding is upstream's: a rank holds ``shard_indices``' rows, zero-fills the ids it
does not own (its ``_embed_local_shard``), and upstream's own ``forward`` all-reduces.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar

import torch
from sglang.srt.layers.vocab_parallel_embedding import VocabParallelEmbedding
from torch import nn

from engram.ssd.directory import shard_name
from engram.tables import EngramTable
from sglang_engram.forward import graph_breaks, lookup_failures
from sglang_engram.models.qwen4_exp.family import Qwen4Exp
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.tables import weight_filter
from sglang_engram.tables.opening import open_layer_table

logger = logging.getLogger(__name__)

FAMILY = Qwen4Exp()
# NOTE: the decoder layer whose PLE table upstream's constructor is building (set by
# the AROUND hook on Qwen4ExpNGramEmbedding.__init__); None for every other embedding.
_BUILDING: ContextVar[int | None] = ContextVar("sglang_engram_ple_layer", default=None)


class PlacedPleTable(VocabParallelEmbedding):
    """One PLE layer's table (this TP rank's rows) in ``ssd`` or ``off``."""

    # NOTE: this process's runtime, bound by the hook that hands the class to SGLang
    # (:func:`placed_ple_table`): SGLang builds the class with upstream's arguments.
    runtime: ClassVar[EngramRuntime]

    def __new__(cls, *args: Any, **kwargs: Any) -> VocabParallelEmbedding:
        if cls is PlacedPleTable and (
            _BUILDING.get() is None or cls.runtime.serving_config().offload in ("hbm", "dram")
        ):
            # NOTE: upstream's own class, built by its own constructor (not an instance
            # of cls, so Python skips our __init__): the hook rebinds the module-level
            # name to us, so the base is read from the class.
            return cls.__base__(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, num_embeddings: int, embedding_dim: int, **kwargs: Any):
        device = torch.device(torch.get_default_device())
        # NOTE: upstream's constructor sets the shard range and everything its forward
        # and the loader read; on the meta device its rows allocate nothing.
        with torch.device("meta"):
            super().__init__(num_embeddings, embedding_dim, **kwargs)
        config = self.runtime.serving_config()
        self.placement = config.offload
        self.layer_id = _BUILDING.get()
        assert self.layer_id is not None, "built inside Qwen4ExpNGramEmbedding only"
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
        if self.placement == "ssd" and self.rows:
            from sglang.srt.runtime_context import get_parallel

            self.table = open_layer_table(
                self.runtime,
                config,
                FAMILY,
                self.layer_id,
                rows=(self.row_start, self.row_start + self.rows),
                head_dim=embedding_dim,
                device=device,
                shard=shard_name(get_parallel().tp_rank, self.tp_size),
            )
        logger.info(
            "sglang-engram: layer %d PLE table in %s: %s, %s",
            self.layer_id,
            self.placement,
            FAMILY.implementation(config),
            self.table.memory() if self.table is not None else "nothing held",
        )

    def _embed_local_shard(self, input_: torch.Tensor) -> torch.Tensor:
        """This rank's rows of ``input_`` (table-wide ids): its table's for the ids it
        owns, zeros for the rest (upstream's ``forward`` then runs its all-reduce)."""
        out = torch.zeros(
            (*input_.shape, self.embedding_dim), dtype=torch.bfloat16, device=input_.device
        )
        if self.table is not None:
            # NOTE: an eager break of SGLang's breakable CUDA graphs (upstream captures a
            # decode step's PLE layer in a segment): every replay reads the live batch's
            # rows into this buffer, which the rest of the graph reads.
            graph_breaks.owned_rows_into(self, input_, out)
        return out

    def fill_owned_rows(self, input_: torch.Tensor, out: torch.Tensor) -> None:
        """``out`` = the rows of ``input_`` this shard holds, zeros for the others."""
        assert self.table is not None, f"PLE layer {self.layer_id}: no table"
        local = input_.long() - self.row_start
        owned = (local >= 0) & (local < self.rows)
        rows = lookup_failures.lookup(
            self.runtime.failures, self.table, local.masked_fill(~owned, 0), owned
        )
        out.copy_(rows.masked_fill(~owned.unsqueeze(-1), 0))


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
    if isinstance(self.ple.ple_embedding.ngram_embedding, PlacedPleTable) and (
        self.ple.ple_embedding.ngram_embedding.placement == "off"
    ):
        return residual
    return original(self, residual)


def placed_ple_table(runtime: EngramRuntime) -> type[PlacedPleTable]:
    """The class that replaces ``VocabParallelEmbedding`` in upstream's module, bound to
    ``runtime``."""
    PlacedPleTable.runtime = runtime
    return PlacedPleTable
