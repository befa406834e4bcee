"""``EngramQwen3ForCausalLM``: the core library's tiny Engram model as an SGLang model.

A Qwen3 decoder (SGLang's ``Qwen3Attention`` over ``RadixAttention`` and the KV
cache, ``Qwen2MLP``, ``RMSNorm``, vocab-parallel embedding and LM head) with an
:class:`EngramBlock` at the start of each Engram layer. The tables sit in the
``--engram-offload`` placement; with ``off`` nothing Engram is built or loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import ClassVar

import torch
from sglang.srt.distributed import tensor_model_parallel_all_reduce
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.logits_processor import LogitsProcessor
from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_loader.weight_utils import default_weight_loader
from sglang.srt.models.qwen2 import Qwen2MLP
from sglang.srt.models.qwen3 import Qwen3Attention
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import add_prefix
from torch import nn

from engram.spec import EngramSpec
from sglang_engram.forward import graph_breaks
from sglang_engram.forward.side_stream import EarlyLookups
from sglang_engram.models.engram_qwen3.engram_block import EngramBlock
from sglang_engram.models.engram_qwen3.family import TinyEngram
from sglang_engram.models.engram_qwen3.hasher import SlotHasher, load_serving_tokenizer
from sglang_engram.models.engram_qwen3.weights import TABLE_TENSOR, route_weight
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.tables import served, weight_filter

logger = logging.getLogger(__name__)


class EngramQwen3DecoderLayer(nn.Module):
    def __init__(self, config, layer_id: int, block: EngramBlock | None, quant_config, prefix):
        super().__init__()
        rope = getattr(config, "rope_parameters", None) or {}
        self.self_attn = Qwen3Attention(
            hidden_size=config.hidden_size,
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            layer_id=layer_id,
            rope_theta=rope.get("rope_theta", getattr(config, "rope_theta", 10000)),
            head_dim=getattr(config, "head_dim", None),
            max_position_embeddings=config.max_position_embeddings,
            quant_config=quant_config,
            rms_norm_eps=config.rms_norm_eps,
            attention_bias=getattr(config, "attention_bias", False),
            prefix=add_prefix("self_attn", prefix),
        )
        self.mlp = Qwen2MLP(
            config.hidden_size,
            config.intermediate_size,
            getattr(config, "hidden_act", "silu"),
            quant_config=quant_config,
            prefix=add_prefix("mlp", prefix),
        )
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.engram = block
        self.tp_size = get_parallel().attn_tp_size

    def forward(
        self, positions: torch.Tensor, x: torch.Tensor, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        if x.shape[0]:
            attn = self.self_attn(positions, self.input_layernorm(x), forward_batch)
            # NOTE: Qwen3Attention leaves the o_proj reduction to its caller.
            if self.tp_size > 1:
                attn = tensor_model_parallel_all_reduce(attn)
            x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x), forward_batch)


class EngramQwen3Model(nn.Module):
    def __init__(self, config, runtime: EngramRuntime, quant_config=None, prefix=""):
        super().__init__()
        engram = runtime.serving_config()
        self.config = config
        self.spec = EngramSpec.from_hf_config(config)
        self.embed_tokens = VocabParallelEmbedding(
            config.vocab_size, config.hidden_size, prefix=add_prefix("embed_tokens", prefix)
        )
        hc_mult = int(getattr(config, "hc_mult", 1) or 1)
        self.blocks: list[EngramBlock] = []
        layers = []
        for i in range(config.num_hidden_layers):
            layer_prefix = add_prefix(f"layers.{i}", prefix)
            block = None
            if engram.enabled and i in self.spec.layer_ids:
                block = EngramBlock(
                    self.spec,
                    i,
                    config.hidden_size,
                    hc_mult,
                    runtime,
                    prefix=add_prefix("engram", layer_prefix),
                )
                self.blocks.append(block)
            layers.append(EngramQwen3DecoderLayer(config, i, block, quant_config, layer_prefix))
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.start_layer, self.end_layer = 0, config.num_hidden_layers
        # With Engram off there is no hasher: SGLang then keeps no Engram history.
        self.engram_hasher = (
            SlotHasher.for_tokenizer(self.spec, load_serving_tokenizer()) if self.blocks else None
        )
        # NOTE: only device lookups go on the side stream early; an ssd lookup reads
        # files on the host, which before layer 0 would hold back every launch (the
        # read-ahead above is its own).
        self.early = EarlyLookups(
            engram.prefetch and engram.placement.holds_table and not engram.placement.host_lookup,
            torch.device(torch.get_default_device()),
        )

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        forward_batch: ForwardBatch,
        input_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids) if input_embeds is None else input_embeds
        rows = self._engram_rows(input_ids, forward_batch)
        for i, layer in enumerate(self.layers):
            if layer.engram is not None:
                x = layer.engram(x, rows[i]())
            x = layer(positions, x, forward_batch)
        return self.norm(x)

    def _engram_rows(
        self, input_ids: torch.Tensor, forward_batch: ForwardBatch
    ) -> dict[int, Callable[[], torch.Tensor]]:
        """Each Engram layer's rows of this batch, by layer id (as a call that waits)."""
        if self.engram_hasher is None:
            return {}
        if not graph_breaks.is_in_breakable_cuda_graph():
            hash_ids = self.engram_hasher(input_ids, forward_batch)
            lookups = [(lambda b=b: b.lookup(hash_ids[:, b.hash_index])) for b in self.blocks]
            started = self.early.start(lookups)
            return {b.layer_id: p.wait for b, p in zip(self.blocks, started, strict=True)}
        # NOTE: a breakable CUDA graph's capture: the lookups (and an extend's hashing)
        # are eager breaks writing into buffers the captured segments read.
        if forward_batch.forward_mode.is_extend():
            hash_ids = self.engram_hasher.new_hash_ids(input_ids)
            graph_breaks.hash_ids_into(self.engram_hasher, input_ids, hash_ids)
        else:
            hash_ids = self.engram_hasher(input_ids, forward_batch)
        spec = self.spec
        out = torch.empty(
            (len(self.blocks), input_ids.shape[0], spec.n_cols, spec.head_dim),
            dtype=torch.bfloat16,
            device=input_ids.device,
        )
        graph_breaks.block_rows_into(self.blocks, hash_ids, out)
        return {b.layer_id: (lambda k=k: out[k]) for k, b in enumerate(self.blocks)}


class EngramQwen3ForCausalLM(nn.Module):
    # NOTE: this process's runtime, bound when the class is registered into SGLang's
    # ModelRegistry (``integration.architectures``): SGLang builds it with its own arguments.
    runtime: ClassVar[EngramRuntime]

    def __init__(self, config, quant_config=None, prefix: str = ""):
        super().__init__()
        self.config = config
        self.engram = self.runtime.serving_config()
        if not self.engram.placement.loads_rows:
            # off: nothing Engram is loaded; ssd: the tables stream from the files.
            weight_filter.skip_tables(self.runtime.skips, all_tables=True)
        self.model = EngramQwen3Model(
            config, self.runtime, quant_config, prefix=add_prefix("model", prefix)
        )
        self.lm_head = ParallelLMHead(
            config.vocab_size,
            config.hidden_size,
            quant_config=quant_config,
            prefix=add_prefix("lm_head", prefix),
        )
        self.logits_processor = LogitsProcessor(config)
        if self.engram.placement.files:
            for block in self.model.blocks:
                block.open_ssd()

    @property
    def start_layer(self) -> int:
        return self.model.start_layer

    @property
    def end_layer(self) -> int:
        return self.model.end_layer

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        forward_batch: ForwardBatch,
        input_embeds: torch.Tensor | None = None,
        get_embedding: bool = False,
        **_: object,
    ):
        hidden = self.model(input_ids, positions, forward_batch, input_embeds)
        return self.logits_processor(input_ids, hidden, self.lm_head, forward_batch)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        params = dict(self.named_parameters())
        blocks = {b.layer_id: b for b in self.model.blocks}
        for name, tensor in weights:
            route = route_weight(name, engram_enabled=self.engram.enabled)
            if route is None:
                continue
            if route.kind == TABLE_TENSOR:
                block = blocks[route.layer_id]
                if block.table is None:
                    block.load_table_tensor(route.param, tensor)
                continue
            param = params.get(route.param)
            if param is None:
                logger.warning("EngramQwen3: checkpoint tensor %s has no parameter", name)
                continue
            loader = getattr(param, "weight_loader", default_weight_loader)
            if route.shard is None:
                loader(param, tensor)
            else:
                loader(param, tensor, route.shard)
        missing = [b.layer_id for b in self.model.blocks if b.table is None]
        if missing:
            raise ValueError(f"the checkpoint has no Engram table for layers {missing}")
        served.log_placement(
            self.runtime.tables,
            self.engram.offload,
            self.engram.role_name,
            TinyEngram().implementation(self.engram),
        )


EntryClass = [EngramQwen3ForCausalLM]
