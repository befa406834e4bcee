"""The tiny Engram model (``EngramQwen3ForCausalLM``): the family entry.

Its Engram layers are DeepSeek-V4.1's (same ``engram_*`` fields, same tables and
checks), on our own Qwen3 model class; every TP rank holds whole tables, all served by
the core library's tables, and it runs without CUDA graphs unless asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang_engram.models.deepseek_v41.family import DeepseekV41
from sglang_engram.protocol.family import HfConfig, ModelFamily, TableShard
from sglang_engram.protocol.hook import CALL, Hook

if TYPE_CHECKING:
    from sglang_engram.protocol.row_hasher import RowHasher

# NOTE: engram.model.config.ARCHITECTURE names it too (that module imports torch, which
# register() must not); test_families checks they agree.
ARCHITECTURE = "EngramQwen3ForCausalLM"


class TinyEngram(DeepseekV41):
    name = "engram_qwen3"
    title = "the tiny Engram model"
    architectures = {ARCHITECTURE: "sglang_engram.models.engram_qwen3.model"}
    hooks = (
        Hook(
            "sglang.srt.utils.hf_transformers.config",
            "get_config",
            "sglang_engram.models.engram_qwen3.hf_config:register_config",
            CALL,
            "teach transformers' AutoConfig the engram_qwen3 model type",
        ),
    )
    eager = True
    # NOTE: our own model class: no upstream table class to build, ours serve every placement.
    upstream_serves = ()

    def matches(self, hf_config: HfConfig) -> bool:
        return ARCHITECTURE in (hf_config.get("architectures") or ()) and super().matches(hf_config)

    def row_hasher(self, model: Any) -> RowHasher | None:
        from sglang_engram.models.deepseek_v41.row_hasher import EngramRowHasher, hash_holder

        holder = hash_holder(model)
        # NOTE: our SlotHasher keeps the core library's NgramHasher it hashes with.
        return None if holder is None else EngramRowHasher(holder.engram_hasher.reference)

    def table_shards(self, hf_config: HfConfig, tp_size: int) -> list[TableShard]:
        # NOTE: every TP rank holds (and converts, once) the whole table.
        return ModelFamily.table_shards(self, hf_config, tp_size)
