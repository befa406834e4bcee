"""DeepSeek-V4.1 (Engram): the family entry the shared modules ask.

Its tables are the ``engram_*`` fields of ``config.json``: one table per Engram layer,
e4m3 rows with ue8m0 block scales, row-sharded over TP on hash-column boundaries
(upstream's ``shard_range``). Upstream's own ``EngramEmbedding`` serves ``hbm`` and
``dram`` (without the HBM hot cache); ours serve the rest (``layers``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sglang_engram.protocol.family import HfConfig, ModelFamily, TableShard, UpstreamServes
from sglang_engram.protocol.hook import Hook
from sglang_engram.protocol.request_limits import RequestLimits, config_vocab_size

if TYPE_CHECKING:
    from sglang_engram.protocol.row_hasher import RowHasher
    from sglang_engram.protocol.server_config import EngramServerConfig

UPSTREAM_TABLE = "upstream SGLang's EngramEmbedding"

_LAYERS = "sglang_engram.models.deepseek_v41.layers"
_HOOKS = (
    Hook(
        "sglang.srt.layers.engram",
        "EngramEmbedding",
        f"{_LAYERS}:placed_engram_embedding",
        "REPLACE",
        "put DeepSeek-V4.1's Engram tables in the --engram-offload placement (upstream's "
        "own class for hbm and dram, ours for ssd, off and the hot cache)",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.layers.engram",
        "Engram.embed_rows",
        "sglang_engram.models.deepseek_v41.upstream_embedding:count_lookups",
        "AROUND",
        "count the lookups of the tables upstream's EngramEmbedding serves for /metrics",
    ),
    Hook(
        "sglang.srt.layers.engram",
        "Engram.forward",
        f"{_LAYERS}:engram_forward",
        "AROUND",
        "make DeepSeek-V4.1's Engram layers the identity when Engram is off",
    ),
)


class DeepseekV41(ModelFamily):
    name = "deepseek_v41"
    title = "DeepSeek-V4.1"
    tables = "Engram"
    hooks = _HOOKS
    # NOTE: the tiny model's checkpoint names them the same way, with a "model." prefix.
    checkpoint_format = "engram"
    table_tensor = re.compile(r"(?:^|\.)layers\.(?P<layer>\d+)\.engram\.embed\.(weight|scale)$")
    # NOTE: dram is upstream's pinned host table unless the HBM hot cache, which only our
    # tables have, is asked for.
    upstream_serves = (
        UpstreamServes("hbm", f"{UPSTREAM_TABLE} (device table)"),
        UpstreamServes(
            "dram",
            f"{UPSTREAM_TABLE} (pinned host table)",
            on_cpu_engine=f"{UPSTREAM_TABLE} (pinned host table; on SGLang's CPU engine its "
            "device table, in host memory)",
            not_with_hot_cache=True,
        ),
    )

    def matches(self, hf_config: HfConfig) -> bool:
        from engram.spec import has_engram

        return has_engram(hf_config)

    def table_layers(self, hf_config: HfConfig | None) -> tuple[int, ...]:
        from engram.presets import DSV41_FLASH

        ids = (hf_config or {}).get("engram_layer_ids") or DSV41_FLASH["engram_layer_ids"]
        return tuple(int(layer) for layer in ids)

    def request_limits(self, hf_config: HfConfig) -> RequestLimits:
        # NOTE: the Engram hash compresses every id through a token map built from the
        # tokenizer, one entry per tokenizer id.
        return RequestLimits(config_vocab_size(hf_config), within_tokenizer=True)

    def row_hasher(self, model: Any) -> RowHasher | None:
        from sglang_engram.models.deepseek_v41.row_hasher import upstream_row_hasher

        return upstream_row_hasher(model)

    def configure_server(
        self, server_args: Any, config: EngramServerConfig
    ) -> tuple[EngramServerConfig, list[str]]:
        """On SGLang's CPU engine, the defaults DeepSeek-V4's model needs there
        (``cpu_engine``); nothing elsewhere."""
        from sglang_engram.models.deepseek_v41.cpu_engine import cpu_engine_defaults, is_dsv4
        from sglang_engram.protocol.model_facts import read_model_facts

        if getattr(server_args, "device", None) != "cpu":
            return config, []
        hf_config = read_model_facts(getattr(server_args, "model_path", None)).hf_config
        if not is_dsv4(hf_config or {}):
            return config, []
        return config, [f"CPU engine: {change}" for change in cpu_engine_defaults(server_args)]

    def check_config(self, hf_config: HfConfig, config: EngramServerConfig) -> None:
        from sglang_engram.models.deepseek_v41.engram_config import check_servable

        check_servable(hf_config, config)

    def table_shards(self, hf_config: HfConfig, tp_size: int) -> list[TableShard]:
        if tp_size == 1:
            return super().table_shards(hf_config, tp_size)
        from sglang.srt.layers.engram import shard_range

        from engram.spec import EngramSpec
        from engram.ssd.directory import shard_name

        spec = EngramSpec.from_hf_config(hf_config)
        shards = []
        for index, layer in enumerate(spec.layer_ids):
            rows = spec.num_embeddings[index]
            bounds = (*spec.offsets[index].tolist(), rows)
            shards += [
                TableShard(
                    layer, shard_range(rows, bounds, rank, tp_size), shard_name(rank, tp_size)
                )
                for rank in range(tp_size)
            ]
        return shards

    def disk_bytes(self, hf_config: HfConfig, shard: TableShard) -> int:
        from engram.spec import EngramSpec
        from engram.ssd.layout import DiskLayout

        spec = EngramSpec.from_hf_config(hf_config)
        rows = spec.num_embeddings[spec.layer_ids.index(shard.layer_id)]
        count = rows if shard.rows is None else shard.rows[1] - shard.rows[0]
        return DiskLayout(count, spec.head_dim).file_bytes
