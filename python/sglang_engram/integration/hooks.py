"""Every place the plugin touches SGLang, as data: the shared hooks, and each model
family's own (:attr:`sglang_engram.protocol.family.ModelFamily.hooks`).

``test_hook_targets`` resolves every target against the installed SGLang, so an
upstream rename fails CI loudly.
"""

from __future__ import annotations

from sglang_engram.integration.kernel_standin.dsv4.hooks import DSV4_STANDIN_HOOKS
from sglang_engram.protocol.hook import CALL, Hook
from sglang_engram.protocol.registry import families

SHARED_HOOKS: tuple[Hook, ...] = (
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
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.models.registry",
        "ModelRegistry.models",
        "sglang_engram.integration.architectures:register_architectures",
        CALL,
        "register the model architectures of the plugin's own families (the tiny model)",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.model_loader.weight_utils",
        "safetensors_weights_iterator",
        "sglang_engram.tables.weight_filter:skip_engram_tables",
        "AROUND",
        "skip reading Engram table tensors that the placement does not load",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.model_loader.weight_utils",
        "buffered_multi_thread_safetensors_weights_iterator",
        "sglang_engram.tables.weight_filter:skip_engram_tables",
        "AROUND",
        "the same with SGLang's default (multi-threaded) loader",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.model_loader.weight_utils",
        "fastsafetensors_weights_iterator",
        "sglang_engram.tables.weight_filter:skip_engram_tables",
        "AROUND",
        "the same with --load-format fastsafetensors",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.model_loader.weight_utils",
        "instanttensor_weights_iterator",
        "sglang_engram.tables.weight_filter:skip_engram_tables",
        "AROUND",
        "the same with --load-format instanttensor",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.model_executor.model_runner",
        "ModelRunner.load_model",
        "sglang_engram.read_ahead.ssd:after_load_model",
        "AFTER",
        "hash prompts for the SSD read-ahead with the loaded model's constants (the "
        "family's row_hasher)",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler._add_request_to_queue",
        "sglang_engram.read_ahead.ssd:after_add_request_to_queue",
        "AFTER",
        "start reading an admitted request's Engram rows from SSD before its prefill",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler.process_batch_result",
        "sglang_engram.read_ahead.ssd:after_process_batch_result",
        "AFTER",
        "start reading the next decode step's Engram rows from SSD once tokens are sampled",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler.run_batch",
        "sglang_engram.integration.run_batch:after_run_batch",
        "AFTER",
        "answer the requests of a batch whose Engram lookup failed (damaged SSD table, I/O "
        "error) with a 500 instead of a dead scheduler; under the overlap scheduler, start "
        "reading the next decode step's Engram rows from SSD once its tokens are sampled; "
        "release a request's prompt read-ahead once its prefill has run",
        with_runtime=True,
    ),
    Hook(
        "sglang.srt.managers.tokenizer_manager",
        "TokenizerManager._validate_one_request",
        "sglang_engram.integration.request_checks:after_validate_one_request",
        "AFTER",
        "answer token ids outside an Engram model's vocabulary with a 400 instead of a "
        "dead scheduler",
        with_runtime=True,
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
        with_runtime=True,
    ),
)

# NOTE: the shared hooks first: the flags must exist before a family's hook reads them.
HOOKS: tuple[Hook, ...] = (
    SHARED_HOOKS + DSV4_STANDIN_HOOKS + tuple(h for f in families() for h in f.hooks)
)

__all__ = ["CALL", "HOOKS", "SHARED_HOOKS", "Hook"]
