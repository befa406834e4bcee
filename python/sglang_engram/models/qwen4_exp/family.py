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

from sglang_engram.models.family import OUR_TABLES, HfConfig, ModelFamily

if TYPE_CHECKING:
    from sglang_engram.args.server_config import EngramServerConfig

UPSTREAM_EMBEDDING = "upstream SGLang's Qwen4ExpNGramEmbedding"
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
    table_tensor = re.compile(
        r"(?:^|\.)layers\.(?P<layer>\d+)\.ple\.ple_embedding\.ngram_embedding\.shard_\d+\.weight$"
    )

    def matches(self, hf_config: HfConfig) -> bool:
        return hf_config.get("model_type") in MODEL_TYPES and bool(
            text_config(hf_config).get("ple_layer_ids")
        )

    def table_layers(self, hf_config: HfConfig | None) -> tuple[int, ...]:
        ids = text_config(hf_config or {}).get("ple_layer_ids") or ()
        return tuple(sorted({int(i) - 1 for i in ids}))

    def implementation(self, config: EngramServerConfig) -> str:
        if config.offload == "hbm":
            return f"{UPSTREAM_EMBEDDING} (device table)"
        if config.offload == "dram":
            return f"{UPSTREAM_EMBEDDING} (Qwen4ExpPinnedHostEmbedding, pinned host table)"
        return OUR_TABLES
