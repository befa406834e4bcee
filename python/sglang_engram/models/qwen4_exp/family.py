"""Qwen3.8-Flash-Next (``qwen4_exp``, its "PLE" n-gram table): the family entry.

One table per PLE layer (``ple_layer_ids`` are 1-based: id 2 is decoder layer 1, the
index its tensors and table directory carry), rows of ``ple_embed_dim / (16)`` values in
fp8 (one per-table bf16 scale) or bf16, row-sharded over TP as upstream's
``VocabParallelEmbedding``. Upstream's own table serves ``hbm`` (device) and ``dram``
(``Qwen4ExpPinnedHostEmbedding``, pinned host memory over UVA); ours serve ``ssd`` and
``off``.
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

UPSTREAM_EMBEDDING = "upstream SGLang's Qwen4ExpNGramEmbedding"
_UPSTREAM = "sglang.srt.models.qwen4_exp"
_LAYERS = "sglang_engram.models.qwen4_exp.layers"
_HOOKS = (
    Hook(
        _UPSTREAM,
        "VocabParallelEmbedding",
        f"{_LAYERS}:placed_ple_table",
        "REPLACE",
        "put Qwen3.8-Flash-Next's PLE tables in ssd (ours) or off; upstream's own "
        "embedding for everything else",
        with_runtime=True,
    ),
    Hook(
        _UPSTREAM,
        "Qwen4ExpNGramEmbedding.__init__",
        f"{_LAYERS}:around_ngram_embedding_init",
        "AROUND",
        "name the decoder layer whose PLE table is being built",
    ),
    Hook(
        _UPSTREAM,
        "Qwen4ExpLayerExtensionMixin._add_ple_embedding",
        f"{_LAYERS}:add_ple_embedding",
        "AROUND",
        "make Qwen3.8-Flash-Next's PLE layers add nothing when the table is off",
    ),
)
MODEL_TYPES = ("qwen4_exp", "qwen4_exp_text")


def text_config(hf_config: HfConfig) -> HfConfig:
    """The text model's fields: nested under ``text_config``, or at the top level in
    older text-only exports (as upstream's ``Qwen4ExpConfig`` reads them)."""
    nested: Any = hf_config.get("text_config")
    return nested if isinstance(nested, dict) else hf_config


class Qwen4Exp(ModelFamily):
    name = "qwen4_exp"
    title = "Qwen3.8-Flash-Next"
    tables = "PLE n-gram"
    hooks = _HOOKS
    # NOTE: the rows' shards and the per-table weight_scale (the ssd table applies it)
    checkpoint_format = "qwen4-exp-ple"
    table_tensor = re.compile(
        r"(?:^|\.)layers\.(?P<layer>\d+)\.ple\.ple_embedding\.ngram_embedding\."
        r"(shard_\d+\.weight|weight_scale)$"
    )
    upstream_serves = (
        UpstreamServes("hbm", f"{UPSTREAM_EMBEDDING} (device table)"),
        UpstreamServes(
            "dram",
            f"{UPSTREAM_EMBEDDING} (Qwen4ExpPinnedHostEmbedding, pinned host table; on "
            "SGLang's CPU engine its table in host memory)",
        ),
    )

    def matches(self, hf_config: HfConfig) -> bool:
        return hf_config.get("model_type") in MODEL_TYPES and bool(
            text_config(hf_config).get("ple_layer_ids")
        )

    def table_layers(self, hf_config: HfConfig | None) -> tuple[int, ...]:
        ids = text_config(hf_config or {}).get("ple_layer_ids") or ()
        return tuple(sorted({int(i) - 1 for i in ids}))

    def request_limits(self, hf_config: HfConfig) -> RequestLimits:
        # NOTE: the PLE hash multiplies raw ids (no token map); the embedding is padded
        # past vocab_size, so an id there would be served from a padding row.
        return RequestLimits(config_vocab_size(text_config(hf_config), "config.json's text model"))

    def configure_server(
        self, server_args: Any, config: EngramServerConfig
    ) -> tuple[EngramServerConfig, list[str]]:
        """``--engram-offload`` as upstream's ``--ple-offload-embedding``: on for ``dram``
        (its pinned host table; on the CPU engine, whose every table is in host memory,
        upstream's table as built there), off for the rest (``ssd`` and ``off`` replace the
        table). Upstream's own flag given alone decides the placement instead."""
        from dataclasses import replace

        from engram.errors import EngramConfigError

        cpu_engine = getattr(server_args, "device", None) == "cpu"
        want = config.placement.host_memory and not cpu_engine
        given = getattr(server_args, "ple_offload_embedding", None)
        if given is None:
            server_args.ple_offload_embedding = want
            where = "pinned host memory" if want else "not offloaded by upstream"
            note = (
                " (the CPU engine's tables are in host memory already)"
                if cpu_engine and config.placement.host_memory
                else ""
            )
            return config, [f"--ple-offload-embedding {'on' if want else 'off'}: {where}{note}"]
        if not config.offload_explicit:
            placement = "dram" if given else "hbm"
            return replace(config, offload=placement), [
                f"--{'' if given else 'no-'}ple-offload-embedding given: placement {placement}"
            ]
        if bool(given) != want and not (cpu_engine and config.placement.host_memory):
            flag = "--ple-offload-embedding" if given else "--no-ple-offload-embedding"
            raise EngramConfigError(
                f"--engram-offload {config.offload} and {flag} ask for different places for "
                f"the PLE table; pass only --engram-offload {config.offload}"
            )
        return config, []

    def row_hasher(self, model: Any) -> RowHasher | None:
        from sglang_engram.models.qwen4_exp.row_hasher import loaded_row_hasher

        return loaded_row_hasher(model)

    def table_shards(self, hf_config: HfConfig, tp_size: int) -> list[TableShard]:
        """Each rank's rows as upstream's ``VocabParallelEmbedding`` shards them (uneven;
        a rank past the last row holds none and has no table directory)."""
        from engram.ssd.checkpoint_formats.ple_config import PleConfig
        from engram.ssd.directory import shard_name
        from engram.tables.vocab_shards import VocabShard

        ple = PleConfig.from_config(dict(hf_config))
        shards = []
        for layer in ple.layer_ids:
            for rank in range(tp_size):
                rows = VocabShard(ple.num_rows(layer), rank, tp_size)
                if rows.rows:
                    whole = tp_size == 1
                    span = None if whole else (rows.start, rows.stop)
                    shards.append(TableShard(layer, span, shard_name(rank, tp_size)))
        return shards

    def disk_bytes(self, hf_config: HfConfig, shard: TableShard) -> int:
        from engram.row_formats import Bf16Rows, E4m3TensorScaleRows
        from engram.ssd.checkpoint_formats.ple_config import PleConfig
        from engram.ssd.layout import DiskLayout

        ple = PleConfig.from_config(dict(hf_config))
        rows = ple.num_rows(shard.layer_id) if shard.rows is None else shard.rows[1] - shard.rows[0]
        # NOTE: without the checkpoint's shards to look at, the config's storage dtype.
        row_format = (E4m3TensorScaleRows if ple.fp8_storage else Bf16Rows).name
        return DiskLayout(rows, ple.head_dim, row_format=row_format).file_bytes
