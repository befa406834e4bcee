"""Where the DeepSeek-V4 stand-ins enter SGLang (``routes``), as data; part of
:data:`sglang_engram.integration.hooks.HOOKS`."""

from __future__ import annotations

from sglang_engram.protocol.hook import Hook

_ROUTES = "sglang_engram.integration.kernel_standin.dsv4.routes"
_ON_CPU = " on SGLang's CPU engine"

DSV4_STANDIN_HOOKS: tuple[Hook, ...] = (
    Hook(
        "sglang.srt.models.deepseek_v4",
        "get_rope_wrapper",
        f"{_ROUTES}:rope_wrapper",
        "AROUND",
        "build a DeepSeek-V4 sliding-window layer's RoPE object" + _ON_CPU + " (its CPU "
        "factory knows only YaRN)",
    ),
    Hook(
        "sglang.srt.models.deepseek_v4",
        "fused_rope_inplace",
        f"{_ROUTES}:rope_inplace",
        "AROUND",
        "DeepSeek-V4's query and output RoPE in torch" + _ON_CPU + " (a JIT CUDA kernel)",
    ),
    Hook(
        "sglang.srt.mem_cache.deepseek_v4_memory_pool",
        "fused_k_norm_rope_flashmla",
        f"{_ROUTES}:k_norm_rope_store",
        "AROUND",
        "DeepSeek-V4's K norm, RoPE and FP8 paged store in torch" + _ON_CPU + " (JIT CUDA)",
    ),
    Hook(
        "sglang.kernels.ops.kvcache.dsv4_main_kv_store",
        "SetKAndS.execute",
        f"{_ROUTES}:set_k_and_s",
        "AROUND",
        "store a quantised DeepSeek-V4 K in torch" + _ON_CPU + " (Triton)",
    ),
    Hook(
        "sglang.srt.layers.attention.deepseek_v4_backend",
        "_create_flashmla_metadata",
        f"{_ROUTES}:no_flashmla_metadata",
        "AROUND",
        "no FlashMLA tile schedule" + _ON_CPU + " (a CUDA library)",
    ),
    Hook(
        "sglang.srt.layers.attention.deepseek_v4_backend",
        "DeepseekV4AttnBackend.__init__",
        f"{_ROUTES}:torch_sparse_attention",
        "AFTER",
        "DeepSeek-V4's sparse FlashMLA attention in torch" + _ON_CPU,
    ),
    Hook(
        "sglang.kernels.ops.layernorm.mhc",
        "hc_split_sinkhorn",
        f"{_ROUTES}:split_sinkhorn",
        "AROUND",
        "DeepSeek-V4's hyper-connection Sinkhorn split in torch" + _ON_CPU + " (TileLang)",
    ),
    Hook(
        "sglang.kernels.ops.layernorm.mhc",
        "mhc_combine",
        f"{_ROUTES}:combine",
        "AROUND",
        "DeepSeek-V4's hyper-connection stream combine in torch" + _ON_CPU + " (Triton)",
    ),
    Hook(
        "sglang.srt.mem_cache.kv_cache_configurator",
        "KVCacheConfigurator._build_dsv4_kv_pool",
        f"{_ROUTES}:fp8_pool_under_bf16",
        "AROUND",
        "build DeepSeek-V4's FP8 KV pool under the bfloat16 KV dtype the CPU engine "
        "accepts (it refuses FP8 without AMX)",
    ),
)
