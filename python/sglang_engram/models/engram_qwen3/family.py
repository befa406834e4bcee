"""The tiny Engram model (``EngramQwen3ForCausalLM``): the family entry.

Its Engram layers are DeepSeek-V4.1's (same ``engram_*`` fields, same tables and
checks), on our own Qwen3 model class; every TP rank holds whole tables, all served by
the core library's tables, and it runs without CUDA graphs unless asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_engram.integration.hook import CALL, Hook
from sglang_engram.models.deepseek_v41.family import DeepseekV41
from sglang_engram.models.family import OUR_TABLES, HfConfig, ModelFamily, TableShard

if TYPE_CHECKING:
    from sglang_engram.args.server_config import EngramServerConfig

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

    def matches(self, hf_config: HfConfig) -> bool:
        return ARCHITECTURE in (hf_config.get("architectures") or ()) and super().matches(hf_config)

    def implementation(self, config: EngramServerConfig) -> str:
        return OUR_TABLES

    def table_shards(self, hf_config: HfConfig, tp_size: int) -> list[TableShard]:
        # NOTE: every TP rank holds (and converts, once) the whole table.
        return ModelFamily.table_shards(self, hf_config, tp_size)
