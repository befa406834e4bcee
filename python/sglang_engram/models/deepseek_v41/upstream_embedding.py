"""DeepSeek-V4.1's ``hbm`` and ``dram`` tables served by upstream SGLang's own code.

Upstream's ``EngramEmbedding`` holds a layer's rows in device memory, or, with its host
table switched on, in pinned host memory the GPU reads over UVA. Both run in upstream's
CI on GPUs, so the plugin builds that class for these placements (``layers.py`` decides)
and adds only what upstream lacks:

- the placement comes from ``--engram-offload``: upstream's own switch
  (``SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE``) is set for the construction from the
  flag, whatever the user's environment says; on several nodes the host table is
  per rank unless ``SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT`` says otherwise;
- the lookups are counted for ``/metrics`` (:class:`UpstreamTable`, fed by the AROUND
  hook on ``Engram.embed_rows``), like those of our tables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack

import torch
from torch import nn

from engram.fp8 import row_bytes
from engram.tables import TableCounters
from engram.tables.timing import LookupClock, Mark
from sglang_engram.models.deepseek_v41.family import DeepseekV41
from sglang_engram.protocol.cpu_engine import cpu_engine_on
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.tables import served

logger = logging.getLogger(__name__)

# NOTE: the attribute of an upstream EngramEmbedding that holds its UpstreamTable.
ATTR = "engram_served"


def build(
    upstream_cls: type[nn.Module], runtime: EngramRuntime, *args: object, **kwargs: object
) -> nn.Module:
    """Upstream's ``EngramEmbedding(*args, **kwargs)`` in the placement of ``runtime``'s
    config (hbm or dram), registered in its served tables for the metrics."""
    from sglang.srt.environ import envs

    config = runtime.serving_config()
    # NOTE: on SGLang's CPU engine the device table is in host memory already; the host
    # table would pin its rows with cudaHostRegister.
    dram = config.placement.host_memory and not cpu_engine_on()
    with ExitStack() as switches:
        switches.enter_context(envs.SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE.override(dram))
        if dram:
            # NOTE: upstream's peer shards take precedence over its host table and would
            # keep the rows in device memory.
            switches.enter_context(envs.SGLANG_OPT_DSV41_ENGRAM_PEER_SHARDS.override(False))
            layout = envs.SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT
            if _multi_node() and not layout.is_set():
                # NOTE: upstream's default "shared" layout opens TP rank 0's memfd through
                # /proc/<pid>/fd, which a rank on another node cannot; the per-rank layout
                # holds each rank's shard in its own process.
                switches.enter_context(layout.override("per_rank"))
        embedding = upstream_cls(*args, **kwargs)
    layer_id = args[2] if len(args) > 2 else kwargs["layer_id"]
    table = UpstreamTable(embedding, config.offload)
    setattr(embedding, ATTR, table)
    served.add(
        runtime.tables, int(layer_id), table, row_start=embedding.row_start, own_requests=True
    )
    logger.info(
        "sglang-engram: layer %s Engram table in %s: %s (%d rows of this rank)",
        layer_id,
        config.offload,
        DeepseekV41().implementation(config),
        embedding.rows,
    )
    return embedding


def _multi_node() -> bool:
    """Whether this server runs on several nodes (a TP group may then span them)."""
    from sglang.srt.runtime_context import get_server_args

    return get_server_args().nnodes > 1


class UpstreamTable:
    """An upstream ``EngramEmbedding`` as the metrics see a table: counters and memory.

    Upstream reads every row it is asked for (no dedup), so rows read are counted as
    requested. NOTE: the ranks that look up the same ids (the whole TP group; under DP
    attention a DP group's attention-TP and CP ranks; in a prefill-CP lookup a CP
    rank's attention-TP ranks) count them once, on the first of those ranks, as
    requested (``own_requests``: every rank exports its count). Reads: with the rows
    sharded over the TP ranks (device table, or the per-rank host layout) exactly one
    rank owns each row of the ids gathered over the group, so that same first rank
    counts them for all; with the shared host table or peer shards each rank reads
    all of its own ids itself and counts them.
    """

    def __init__(self, embedding: nn.Module, placement: str):
        from sglang.srt.runtime_context import get_parallel

        self.embedding = embedding
        self.placement = placement
        self.num_rows = embedding.rows
        self.counters = TableCounters()
        self.row_bytes = row_bytes(embedding.dim)
        host = embedding.host_table
        self._shared = host is not None and host.layout == "shared"
        parallel = get_parallel()
        first_rank = parallel.tp_rank == 0
        self._reads_own_ids = embedding.tp_size == 1 or embedding.peer is not None or self._shared
        self._first_of_attn_tp = parallel.attn_tp_rank == 0
        self._first_of_group = (
            first_rank
            if parallel.attn_dp_size == 1
            else parallel.attn_tp_rank == 0 and parallel.attn_cp_rank == 0
        )
        self._holds_memory = not self._shared or first_rank
        # NOTE: built inside SGLang's default-device context: the device that reads the rows.
        self._clock = LookupClock(torch.device(torch.get_default_device()))

    @property
    def tier(self) -> str:
        """The memory tier holding the rows. NOTE: upstream's tables have no hot cache:
        every row is in the placement's own tier (hbm: device, dram: pinned host)."""
        return self.placement

    def memory(self) -> dict[str, int]:
        """Bytes of the rows per tier (the shared host table once, on TP rank 0)."""
        held = self.embedding.weight.numel() + self.embedding.scale.numel()
        return {self.tier: held if self._holds_memory else 0}

    def stats(self) -> dict[str, float]:
        """Upstream's tables keep no counts besides ``counters``."""
        return {}

    def read_ahead(self, row_ids: torch.Tensor, *, urgent: bool = False) -> None:
        """Upstream's rows are in device or host memory: nothing to read ahead."""
        return None

    def start(self) -> Mark:
        return self._clock.start()

    def counts_ids(self, cp_all_tokens: bool) -> bool:
        """Whether this rank is the one that counts the ids of a lookup (see the class):
        ``cp_all_tokens`` (a prefill-CP lookup) gives each CP rank its own ids."""
        if cp_all_tokens and self.embedding.tp_size > 1:
            return self._first_of_attn_tp
        return self._first_of_group

    def record(self, rows: int, mark: Mark, cp_all_tokens: bool = False) -> None:
        if mark is None:
            # NOTE: captured into a CUDA graph: a capture looks up dummy batches, and
            # its replays run no Python, so neither is counted.
            return
        mine = self.counts_ids(cp_all_tokens)
        requested = rows if mine else 0
        read = rows if self._reads_own_ids or mine else 0
        self.counters.record(
            requested, read, {self.tier: read * self.row_bytes}, self._clock.stop(mark)
        )


def count_lookups(
    original: Callable[..., torch.Tensor],
    engram: nn.Module,
    hash_ids: torch.Tensor,
    *args: object,
    **kwargs: object,
) -> torch.Tensor:
    """AROUND ``Engram.embed_rows`` (every lookup of a layer, staged rows included):
    count the lookups of tables upstream serves (ours count their own)."""
    table: UpstreamTable | None = getattr(engram.embed, ATTR, None)
    if table is None:
        return original(engram, hash_ids, *args, **kwargs)
    # NOTE: Engram calls embed_rows(hash_ids, forward_batch, cp_all_tokens).
    cp_all_tokens = bool(args[1] if len(args) > 1 else kwargs.get("cp_all_tokens", False))
    mark = table.start()
    rows = original(engram, hash_ids, *args, **kwargs)
    table.record(hash_ids.numel(), mark, cp_all_tokens)
    return rows
