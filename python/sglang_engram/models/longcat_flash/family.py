"""LongCat-Flash (n-gram embedding): a family the plugin recognises and leaves to upstream.

In SGLang 0.5.23 its hashing and per-request token table are CUDA-only JIT kernels and
its table has no offload of any kind, so ``--engram-offload`` cannot place it; the
start-up log and ``doctor`` say so instead of silently ignoring the flag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_engram.protocol.family import HfConfig, ModelFamily
from sglang_engram.protocol.request_limits import RequestLimits, config_vocab_size

if TYPE_CHECKING:
    from sglang_engram.protocol.server_config import EngramServerConfig

UPSTREAM = (
    "upstream SGLang's own n-gram embedding (the plugin leaves it to upstream: in 0.5.23 its "
    "hashing and token table are CUDA-only kernels and it has no offload)"
)


class LongcatFlash(ModelFamily):
    name = "longcat_flash"
    title = "LongCat-Flash"
    tables = "n-gram embedding"
    served = False

    def matches(self, hf_config: HfConfig) -> bool:
        ratio = hf_config.get("ngram_vocab_size_ratio", hf_config.get("oe_vocab_size_ratio"))
        return hf_config.get("model_type") == "longcat_flash" and ratio is not None

    def table_layers(self, hf_config: HfConfig | None) -> tuple[int, ...]:
        return ()

    def request_limits(self, hf_config: HfConfig) -> RequestLimits:
        return RequestLimits(config_vocab_size(hf_config))

    def implementation(self, config: EngramServerConfig) -> str:
        return UPSTREAM
