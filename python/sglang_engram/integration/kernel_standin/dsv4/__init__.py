"""Plain-torch STAND-INS for the CUDA-only ops DeepSeek-V4's model takes on SGLang's CPU
engine, for a checkpoint whose attention layers are all sliding-window (every
``compress_ratios`` entry 0).

Upstream's ``DeepseekV4ForCausalLM``, its ``DeepseekV4AttnBackend`` and its
``DeepSeekV4TokenToKVPool`` run on the CPU engine; what they cannot run there are a few
JIT CUDA, Triton, TileLang and FlashMLA kernels. Each has a torch version here, with the
kernel's contract (one module per kind: ``rope``, ``k_cache``, ``sparse_mla``, ``mhc``),
and ``routes`` sends upstream's call to it, as hooks (``hooks.py``), only on the CPU
engine (``SGLANG_USE_CPU_ENGINE=1``) with CPU tensors; anywhere else upstream's own
kernel runs. Each logs its name once per process when it first runs. Importing this
package imports neither torch nor SGLang (the names feed ``doctor``).
"""

from __future__ import annotations

# NOTE: upstream's name -> what the stand-in computes; ``doctor`` lists them and the
# log names each the first time it runs.
DSV4_STANDINS: dict[str, str] = {
    "get_rope_wrapper": "a generic RoPE object for sliding-window layers (the CPU factory "
    "knows only YaRN; no ratio-0 layer calls it)",
    "fused_rope_inplace": "RoPE and inverse RoPE of the query and output tails",
    "fused_k_norm_rope_flashmla": "the K RMSNorm, RoPE, per-64 ue8m0 FP8 quantisation and "
    "paged V4 store",
    "SetKAndS": "the paged V4 store of a quantised K",
    "_create_flashmla_metadata": "no FlashMLA tile schedule",
    "flash_mla_with_kvcache": "sparse MQA over the V4 FP8 pages with the attention sink",
    "hc_split_sinkhorn": "the hyper-connection pre/post/comb split and Sinkhorn",
    "mhc_combine": "the hyper-connection stream combine",
}
