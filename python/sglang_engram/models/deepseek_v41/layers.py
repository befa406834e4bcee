"""DeepSeek-V4.1's Engram tables in the ``--engram-offload`` placement.

SGLang builds one ``EngramEmbedding`` per Engram layer (inside ``Engram``); the
plugin replaces that name with :class:`PlacedEngramEmbedding`, whose shared part
(:mod:`sglang_engram.forward.placed_table`) builds the code the family declares for
the placement (``DeepseekV41.upstream_serves``):

- ``hbm``, and ``dram`` without a hot cache: upstream's own class
  (:mod:`sglang_engram.models.deepseek_v41.upstream_embedding`), its device or pinned host table;
- ``ssd``, ``off`` and ``dram`` with ``--engram-hot-cache-gb``: this subclass, whose
  rows live in a core-library table: ``ssd`` (files under ``--engram-ssd-dir``,
  converted from the checkpoint on first start, reused afterwards), ``dram`` (pinned
  host memory behind the HBM hot cache) or ``off`` (nothing loaded; ``engram_forward``
  makes the layer the identity).

TP sharding is upstream's: each rank holds the rows ``shard_range`` gives it, looks
up every hash id, zero-fills the rows it does not own (``placed_table.owned_rows``) and
upstream's all-reduce reassembles them (``_lookup``/``_dp_sharded_lookup`` call our
``_owned_rows``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from sglang.srt.environ import envs
from sglang.srt.layers.engram import Engram, EngramEmbedding
from torch import nn

from engram.spec import FP8_BLOCK
from engram.tables import EngramTable
from engram.tables.dram import packed_host_rows
from sglang_engram.forward.placed_table import PlacedTable
from sglang_engram.models.deepseek_v41 import upstream_embedding
from sglang_engram.models.deepseek_v41.family import DeepseekV41
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.protocol.server_config import EngramServerConfig
from sglang_engram.tables import weight_filter


class PlacedEngramEmbedding(EngramEmbedding, PlacedTable):
    """One layer's (TP shard of the) Engram table in our placement."""

    family = DeepseekV41()

    @classmethod
    def build_upstream(cls, upstream: type, *args: object, **kwargs: object) -> EngramEmbedding:
        """Upstream's class in the placement, its lookups counted for the metrics."""
        return upstream_embedding.build(upstream, cls.runtime, *args, **kwargs)

    def __init__(
        self, num_embeddings: int, dim: int, layer_id: int, column_bounds: tuple[int, ...]
    ):
        # NOTE: recorded before the meta device below hides it: __init__ runs inside
        # SGLang's device context, but finish_load runs from load_weights, outside it
        # (where the default is the CPU).
        device = _serving_device()
        # NOTE: upstream's constructor sets every attribute its forward path reads (the
        # shard range, "no peer shards, no host table"); run with those two switched off
        # and on the meta device, its device rows allocate nothing. Ours replace them
        # below. test_upstream_classes compares the attributes with an upstream-built
        # instance, so one a new SGLang sets differently fails there.
        with _device_table_branch(), torch.device("meta"):
            super().__init__(num_embeddings, dim, layer_id, column_bounds)
        self.config: EngramServerConfig = self.runtime.serving_config()
        self.layer_id = layer_id
        self.table: EngramTable | None = None
        self.device = device
        if self.config.placement.files and self.rows:
            # Streams this rank's rows from the checkpoint files (first start only).
            # NOTE: a rank may own no rows of a small table (more ranks than rows): it
            # holds no table and looks up zeros, which upstream's all-reduce expects.
            self.table = self.open_table(self.dim, self.device)
        if not self.config.placement.loads_rows:
            weight_filter.skip_tables(self.runtime.skips, layers={layer_id})
        weight, scale = self._load_targets()
        self.weight = nn.Parameter(weight.view(torch.float8_e4m3fn), requires_grad=False)
        self.scale = nn.Parameter(scale.view(torch.float8_e8m0fnu), requires_grad=False)
        self.weight.weight_loader = self._load_rows
        self.scale.weight_loader = self._load_rows

    def _load_targets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 weight and scale the loader writes this shard's rows into: for dram the
        packed host buffer the table then adopts (the rows are held once); nothing for
        ssd and off, or a shard without rows."""
        if self.config.placement.loads_rows and self.rows:
            return packed_host_rows(self.rows, self.dim, self.device)
        weight = torch.empty(0, self.dim, dtype=torch.uint8)
        return weight, torch.empty(0, self.dim // FP8_BLOCK, dtype=torch.uint8)

    def _load_rows(self, param: nn.Parameter, loaded_weight: torch.Tensor) -> None:
        if param.shape[0] == 0:
            return  # off or ssd: the table's rows are not read through the loader
        param.data.copy_(loaded_weight[self.row_start : self.row_start + self.rows])

    def finish_load(self, label: str) -> None:
        if self.config.placement.loads_rows and self.table is None and self.rows:
            self.table = self.open_table(self.dim, self.device, self.weight.data, self.scale.data)
            # NOTE: the table adopted the loaded buffer; only the table refers to it now.
            self.weight.data = self.weight.data.new_empty(0, self.dim)
            self.scale.data = self.scale.data.new_empty(0, self.dim // FP8_BLOCK)
        self.log_table(f"{label} Engram table")

    def _owned_rows(self, indices: torch.Tensor) -> torch.Tensor:
        """Upstream's name for the lookup its ``_lookup``/``_dp_sharded_lookup`` call."""
        return self.lookup_owned(indices, self.new_rows(indices))


def engram_forward(
    original: Callable[..., torch.Tensor],
    self: Engram,
    x: torch.Tensor,
    *args: object,
    **kwargs: object,
) -> torch.Tensor:
    """AROUND ``Engram.forward``: with Engram off the residual passes unchanged."""
    if isinstance(self.embed, PlacedEngramEmbedding) and self.embed.is_off:
        return x
    return original(self, x, *args, **kwargs)


def placed_engram_embedding(runtime: EngramRuntime) -> type[PlacedEngramEmbedding]:
    """The class that replaces upstream's ``EngramEmbedding``, bound to ``runtime``."""
    PlacedEngramEmbedding.runtime = runtime
    return PlacedEngramEmbedding


@contextmanager
def _device_table_branch() -> Iterator[None]:
    """Upstream's switches set so that its constructor takes the device-table branch."""
    with (
        envs.SGLANG_OPT_DSV41_ENGRAM_PEER_SHARDS.override(False),
        envs.SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE.override(False),
    ):
        yield


def _serving_device() -> torch.device:
    """The device SGLang builds the model on (its default-device context)."""
    return torch.device(torch.get_default_device())
