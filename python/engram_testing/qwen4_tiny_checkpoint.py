"""A tiny random Qwen3.8-Flash-Next (``qwen4_exp``) checkpoint, as upstream reads one.

Four decoder layers (three Gated DeltaNet, then full attention), hyper-connections, a
four-expert MoE and two PLE layers (``ple_layer_ids`` 2 and 3: PLE sits on linear
attention layers only) whose n-gram tables hold a few thousand rows. Tensor names,
shapes and dtypes are the released checkpoint's as upstream's ``load_weights`` expects
them: the ``model.language_model.`` prefix, split ``in_proj_qkv``/``z``/``b``/``a``,
per-expert MoE weights, each PLE table in ``split_ngram_parts`` row shards
``...ngram_embedding.shard_{k}.weight`` (shard ``k`` = rows ``[k*ceil(rows/parts), ...)``)
with the buffers ``layer_multipliers``, ``ngram_heads_vocab_sizes``,
``ngram_heads_offsets`` and, for fp8 tables, the per-table bf16 ``weight_scale``.
``config.json`` has no QSA indexer fields (full attention runs as plain attention) and
``language_model_only`` (no vision tower). The tokenizer is the tiny Engram model's BPE
(``engram/assets``: 2,000 ids, eos 1).

Every value comes from one seeded ``torch.Generator``; PLE projections and its conv are
drawn large enough that switching PLE off changes the logits. NOTE: the checkpoint's
``layer_multipliers`` are drawn from the seed (odd, below upstream's overflow bound), not
computed by upstream's SplitMix64, so code that recomputes them instead of reading the
checkpoint hashes to other rows.

    python -m engram_testing.qwen4_tiny_checkpoint --out DIR [--ple-dtype fp8|bf16]
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from safetensors.torch import save_file

from engram.cli import Parser, directory, number, run
from engram.errors import EngramConfigError
from engram.model.safetensors_stream import write_safetensors
from engram.model.tokenizer import EOS_TOKEN_ID, asset_bytes, tokenizer_config
from engram.primes import is_prime

PLE_DTYPES = ("fp8", "bf16")
WEIGHTS_FILE = "model.safetensors"
PREFIX = "model.language_model."
LAYER_TYPES = ("linear_attention", "linear_attention", "linear_attention", "full_attention")
_VOCAB = 2000
_HIDDEN = 64
_HC = 2
_EXPERTS = 4
_MOE_WIDTH = 32
_HEADS, _KV_HEADS, _HEAD_DIM = 4, 2, 32
_LIN_K_HEADS, _LIN_V_HEADS, _LIN_K_DIM, _LIN_V_DIM = 2, 4, 32, 16
_CONV = 4
_PLE_DIM = 256
_NGRAM, _HEADS_PER_NGRAM = 3, 8
_ROW_MULTIPLE = 128
_MAX_POSITIONS = 4096


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
        return (_NGRAM - 1) * _HEADS_PER_NGRAM

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
        return math.ceil(total / _ROW_MULTIPLE) * _ROW_MULTIPLE

    @property
    def text_config(self) -> dict[str, object]:
        return {
            "model_type": "qwen4_exp_text",
            "vocab_size": _VOCAB,
            "hidden_size": _HIDDEN,
            "num_hidden_layers": len(LAYER_TYPES),
            "layer_types": list(LAYER_TYPES),
            "full_attention_interval": len(LAYER_TYPES),
            "num_attention_heads": _HEADS,
            "num_key_value_heads": _KV_HEADS,
            "head_dim": _HEAD_DIM,
            "linear_num_key_heads": _LIN_K_HEADS,
            "linear_num_value_heads": _LIN_V_HEADS,
            "linear_key_head_dim": _LIN_K_DIM,
            "linear_value_head_dim": _LIN_V_DIM,
            "linear_conv_kernel_dim": _CONV,
            "num_experts": _EXPERTS,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": _MOE_WIDTH,
            "shared_expert_intermediate_size": _MOE_WIDTH,
            "norm_topk_prob": True,
            "hc_count": _HC,
            "hc_lowrank": 16,
            "ple_layer_ids": list(self.ple_layer_ids),
            "ple_embed_dim": _PLE_DIM,
            "ple_conv_kernel_size": _CONV,
            "ngram_size": _NGRAM,
            "heads_per_ngram": _HEADS_PER_NGRAM,
            "ngram_vocab_size_base": self.ngram_vocab_size_base,
            "make_ngram_vocab_size_divisible_by": _ROW_MULTIPLE,
            "split_ngram_parts": self.split_ngram_parts,
            **({"ple_embedding_dtype": "float8_e4m3fn"} if self.ple_dtype == "fp8" else {}),
            "hidden_act": "silu",
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": _MAX_POSITIONS,
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


def write_tiny_checkpoint(
    out: Path,
    *,
    ple_dtype: str = "fp8",
    seed: int = 0,
    ple_layer_ids: Sequence[int] = (2, 3),
    ngram_vocab_size_base: int = 200,
    split_ngram_parts: int = 8,
    stream_tables: bool = False,
) -> Path:
    """Write the checkpoint directory ``out`` (``config.json`` last: an interrupted build
    has none); returns ``out``. ``stream_tables``: the PLE tables written chunk by chunk,
    never whole in memory (tables of many GiB; other values than the default's)."""
    options = TinyQwen4Options(
        ple_dtype, seed, tuple(ple_layer_ids), ngram_vocab_size_base, split_ngram_parts
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").unlink(missing_ok=True)
    # NOTE: imported here, not at the top: it imports this module for the sizes
    from engram_testing import qwen4_tiny_weights as tiny_weights

    if stream_tables:
        tensors = tiny_weights.streamed_tensors(options)
        write_safetensors(out / WEIGHTS_FILE, tensors, metadata={"format": "pt"})
    else:
        weights = tiny_weights.draw_weights(options)
        save_file(weights, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / "tokenizer.json").write_bytes(asset_bytes())
    tokenizer = tokenizer_config(_MAX_POSITIONS)
    (out / "tokenizer_config.json").write_text(
        json.dumps(tokenizer, indent=2, sort_keys=True) + "\n"
    )
    (out / "config.json").write_text(json.dumps(options.config, indent=2) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(
        prog="python -m engram_testing.qwen4_tiny_checkpoint",
        description="Write a tiny random Qwen3.8-Flash-Next (qwen4_exp) checkpoint with upstream's tensor names.",
    )
    parser.add_argument(
        "--out", type=directory, required=True, help="the checkpoint directory to write"
    )
    parser.add_argument(
        "--ple-dtype", choices=PLE_DTYPES, default="fp8", help="the PLE tables' dtype"
    )
    parser.add_argument(
        "--seed", type=number(int, at_least=0), default=0, help="seed of every weight"
    )
    args = parser.parse_args(argv)

    def body() -> None:
        write_tiny_checkpoint(args.out, ple_dtype=args.ple_dtype, seed=args.seed)
        print(
            f"wrote a tiny qwen4_exp checkpoint ({args.ple_dtype} PLE tables) to {args.out.resolve()}"
        )

    return run(body, args)


if __name__ == "__main__":
    raise SystemExit(main())
