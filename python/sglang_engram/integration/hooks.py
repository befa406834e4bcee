"""Every place the plugin touches SGLang, as data.

Each :class:`Hook` names an upstream module, an attribute path inside it, our
function (as ``"module:name"``, imported only when the upstream module is) and how it
is applied: one of SGLang's ``HookType`` names, or ``CALL`` for a registration that
runs our function once with the upstream module. ``test_hook_targets`` resolves every
target against the installed SGLang, so an upstream rename fails CI loudly.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

CALL = "CALL"


@dataclass(frozen=True)
class Hook:
    module: str
    attr: str
    ours: str
    kind: str
    why: str

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attr}"

    def resolve_target(self) -> Any:
        """The upstream object (imports its module); raises if it does not exist."""
        obj: Any = importlib.import_module(self.module)
        for part in self.attr.split("."):
            obj = getattr(obj, part)
        return obj

    @property
    def ours_module(self) -> str:
        return self.ours.partition(":")[0]

    def resolve_ours(self) -> Any:
        module, _, name = self.ours.partition(":")
        return getattr(importlib.import_module(module), name)


HOOKS: tuple[Hook, ...] = (
    Hook(
        "sglang.srt.server_args",
        "ServerArgs.add_cli_args",
        "sglang_engram.args.flags:add_cli_args_hook",
        "AFTER",
        "add the --engram-* flags to the server parser",
    ),
    Hook(
        "sglang.srt.server_args",
        "ServerArgs.from_cli_args",
        "sglang_engram.args.flags:from_cli_args_hook",
        "AFTER",
        "validate the flags and carry them to the scheduler processes",
    ),
    Hook(
        "sglang.srt.utils.hf_transformers.config",
        "get_config",
        "sglang_engram.models.engram_qwen3.hf_config:register_config",
        CALL,
        "teach transformers' AutoConfig the engram_qwen3 model type",
    ),
    Hook(
        "sglang.srt.models.registry",
        "ModelRegistry.models",
        "sglang_engram.models:register_architectures",
        CALL,
        "register the EngramQwen3ForCausalLM architecture",
    ),
    Hook(
        "sglang.srt.model_loader.weight_utils",
        "safetensors_weights_iterator",
        "sglang_engram.tables.weight_filter:skip_engram_tables",
        "AROUND",
        "skip reading Engram table tensors that the placement does not load",
    ),
    Hook(
        "sglang.srt.model_loader.weight_utils",
        "buffered_multi_thread_safetensors_weights_iterator",
        "sglang_engram.tables.weight_filter:skip_engram_tables",
        "AROUND",
        "the same with SGLang's default (multi-threaded) loader",
    ),
    Hook(
        "sglang.srt.model_loader.weight_utils",
        "fastsafetensors_weights_iterator",
        "sglang_engram.tables.weight_filter:skip_engram_tables",
        "AROUND",
        "the same with --load-format fastsafetensors",
    ),
    Hook(
        "sglang.srt.model_loader.weight_utils",
        "instanttensor_weights_iterator",
        "sglang_engram.tables.weight_filter:skip_engram_tables",
        "AROUND",
        "the same with --load-format instanttensor",
    ),
    Hook(
        "sglang.srt.layers.engram",
        "EngramEmbedding",
        "sglang_engram.models.deepseek_v41.layers:PlacedEngramEmbedding",
        "REPLACE",
        "put DeepSeek-V4.1's Engram tables in the --engram-offload placement (upstream's "
        "own class for hbm and dram, ours for ssd, off and the hot cache)",
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
        "sglang_engram.models.deepseek_v41.layers:engram_forward",
        "AROUND",
        "make DeepSeek-V4.1's Engram layers the identity when Engram is off",
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler._add_request_to_queue",
        "sglang_engram.lookahead.ssd_read_ahead:after_add_request_to_queue",
        "AFTER",
        "start reading an admitted request's Engram rows from SSD before its prefill",
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler.process_batch_result",
        "sglang_engram.lookahead.ssd_read_ahead:after_process_batch_result",
        "AFTER",
        "start reading the next decode step's Engram rows from SSD once tokens are sampled",
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler.run_batch",
        "sglang_engram.integration.lookup_failures:after_run_batch",
        "AFTER",
        "answer the requests of a batch whose Engram lookup failed (damaged SSD table, I/O "
        "error) with a 500 instead of a dead scheduler",
    ),
    Hook(
        "sglang.srt.models.deepseek_v4",
        "DeepseekV4Model.__init__",
        "sglang_engram.models.deepseek_v41.layers:after_model_init",
        "AFTER",
        "hash DeepSeek-V4.1's prompts for the SSD read-ahead with its Engram constants",
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager",
        "TokenizerManager._validate_one_request",
        "sglang_engram.integration.request_checks:after_validate_one_request",
        "AFTER",
        "answer token ids outside an Engram model's vocabulary with a 400 instead of a "
        "dead scheduler",
    ),
    Hook(
        "sglang.srt.disaggregation.mooncake.conn",
        "MooncakeKVSender",
        "sglang_engram.integration.cpu_serving:plain_kv_sender",
        CALL,
        "send PD KV chunks without pinned memory and CUDA events on the CPU engine",
    ),
    Hook(
        "sglang.srt.arg_groups.overrides",
        "supports_mamba_cache_extra_buffer",
        "sglang_engram.integration.cpu_serving:no_extra_buffer_on_cpu",
        "AROUND",
        "resolve --mamba-radix-cache-strategy auto to no_buffer on the CPU engine, which "
        "cannot run the extra_buffer that upstream's auto picks for hybrid models",
    ),
    Hook(
        "sglang.kernels.ops.attention.fla.layernorm_gated",
        "RMSNorm.forward",
        "sglang_engram.integration.kernel_standin.routes:gated_rmsnorm_forward",
        "AROUND",
        "run a Gated DeltaNet layer's output norm with the sgl_kernel stand-in's op on the "
        "CPU engine (upstream takes that op only on AMX CPUs, else a Triton kernel that "
        "needs a GPU)",
    ),
    Hook(
        "sglang.srt.models.qwen2_moe",
        "fused_gate_sigmoid_mul_add",
        "sglang_engram.integration.kernel_standin.routes:shared_expert_gate_add",
        "AROUND",
        "gate a Qwen MoE block's shared expert in torch on the CPU engine (upstream's Triton "
        "kernel needs a GPU; only AMX CPUs avoid it)",
    ),
    Hook(
        "sglang.srt.models.qwen2_moe",
        "fused_gate_sigmoid_mul",
        "sglang_engram.integration.kernel_standin.routes:shared_expert_gate",
        "AROUND",
        "the same for the out-of-place gate of a deferred MoE finalize",
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler.init_metrics_collector",
        "sglang_engram.metrics.exporter:after_init_metrics_collector",
        "AFTER",
        "export the Engram counters on SGLang's Prometheus /metrics",
    ),
)
