"""The tiny Qwen3.8-Flash-Next (``qwen4_exp``) checkpoint's shape: its fixed sizes and
what a caller can vary (:class:`TinyQwen4Options`, which also writes its
``config.json``). ``qwen4_tiny_weights`` draws the tensors of that shape and
``qwen4_tiny_checkpoint`` writes them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from engram.errors import EngramConfigError
from engram.model.tokenizer import EOS_TOKEN_ID
from engram.primes import is_prime

PLE_DTYPES = ("fp8", "bf16")
PREFIX = "model.language_model."
LAYER_TYPES = ("linear_attention", "linear_attention", "linear_attention", "full_attention")
VOCAB = 2000
HIDDEN = 64
HC = 2
EXPERTS = 4
MOE_WIDTH = 32
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 32
LIN_K_HEADS, LIN_V_HEADS, LIN_K_DIM, LIN_V_DIM = 2, 4, 32, 16
CONV = 4
PLE_DIM = 256
NGRAM, HEADS_PER_NGRAM = 3, 8
ROW_MULTIPLE = 128
MAX_POSITIONS = 4096


@dataclass(frozen=True)
class TinyQwen4Options:
    """What the tiny checkpoint can vary."""

    ple_dtype: str = "fp8"
    seed: int = 0
    ple_layer_ids: tuple[int, ...] = (2, 3)
    ngram_vocab_size_base: int = 200
    split_ngram_parts: int = 8

    def __post_init__(self) -> None:
        if self.ple_dtype not in PLE_DTYPES:
            raise EngramConfigError(
                f"ple_dtype must be one of {PLE_DTYPES}, not {self.ple_dtype!r}"
            )
        bad = [i for i in self.ple_layer_ids if not (1 <= i <= len(LAYER_TYPES))]
        bad += [
            i
            for i in self.ple_layer_ids
            if i not in bad and LAYER_TYPES[i - 1] != "linear_attention"
        ]
        if bad or not self.ple_layer_ids or len(set(self.ple_layer_ids)) != len(self.ple_layer_ids):
            raise EngramConfigError(
                f"ple_layer_ids must be distinct linear-attention layers among 1-3, got {list(self.ple_layer_ids)}"
            )
        if self.ngram_vocab_size_base < 2:
            raise EngramConfigError("ngram_vocab_size_base must be >= 2")
        for ple_index in range(len(self.ple_layer_ids)):
            rows = self.table_rows(ple_index)
            step = math.ceil(rows / self.split_ngram_parts)
            if self.split_ngram_parts < 1 or step * (self.split_ngram_parts - 1) >= rows:
                raise EngramConfigError(
                    f"split_ngram_parts {self.split_ngram_parts} leaves an empty shard of a "
                    f"{rows}-row table; use a divisor of {rows}"
                )

    @property
    def ngram_heads(self) -> int:
        return (NGRAM - 1) * HEADS_PER_NGRAM

    def head_sizes(self, ple_index: int) -> list[int]:
        """Each head's prime bucket count: global head ``g`` takes the ``(g+1)``-th prime
        at or above ``ngram_vocab_size_base`` (upstream's layout)."""
        wanted = (ple_index + 1) * self.ngram_heads
        primes, candidate = [], self.ngram_vocab_size_base - 1
        while len(primes) < wanted:
            candidate += 1
            if is_prime(candidate):
                primes.append(candidate)
        return primes[-self.ngram_heads :]

    def table_rows(self, ple_index: int) -> int:
        total = sum(self.head_sizes(ple_index))
        return math.ceil(total / ROW_MULTIPLE) * ROW_MULTIPLE

    @property
    def text_config(self) -> dict[str, object]:
        return {
            "model_type": "qwen4_exp_text",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "num_hidden_layers": len(LAYER_TYPES),
            "layer_types": list(LAYER_TYPES),
            "full_attention_interval": len(LAYER_TYPES),
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM,
            "linear_num_key_heads": LIN_K_HEADS,
            "linear_num_value_heads": LIN_V_HEADS,
            "linear_key_head_dim": LIN_K_DIM,
            "linear_value_head_dim": LIN_V_DIM,
            "linear_conv_kernel_dim": CONV,
            "num_experts": EXPERTS,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": MOE_WIDTH,
            "shared_expert_intermediate_size": MOE_WIDTH,
            "norm_topk_prob": True,
            "hc_count": HC,
            "hc_lowrank": 16,
            "ple_layer_ids": list(self.ple_layer_ids),
            "ple_embed_dim": PLE_DIM,
            "ple_conv_kernel_size": CONV,
            "ngram_size": NGRAM,
            "heads_per_ngram": HEADS_PER_NGRAM,
            "ngram_vocab_size_base": self.ngram_vocab_size_base,
            "make_ngram_vocab_size_divisible_by": ROW_MULTIPLE,
            "split_ngram_parts": self.split_ngram_parts,
            **({"ple_embedding_dtype": "float8_e4m3fn"} if self.ple_dtype == "fp8" else {}),
            "hidden_act": "silu",
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": MAX_POSITIONS,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10_000_000.0,
                "partial_rotary_factor": 0.25,
            },
            "bos_token_id": 0,
            "eos_token_id": EOS_TOKEN_ID,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        }

    @property
    def config(self) -> dict[str, object]:
        return {
            "architectures": ["Qwen4ExpForConditionalGeneration"],
            "model_type": "qwen4_exp",
            "language_model_only": True,
            "text_config": self.text_config,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "bos_token_id": 0,
            "eos_token_id": EOS_TOKEN_ID,
        }
