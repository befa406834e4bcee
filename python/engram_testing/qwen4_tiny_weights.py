"""The tiny ``qwen4_exp`` checkpoint's tensors: names and shapes as the released
checkpoint has them, values drawn from one seeded generator in sorted-name order
(``draw_weights``), or, for PLE tables larger than memory, each table shard streamed
chunk by chunk from generators of its own (``streamed_tensors``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from engram.model.safetensors_stream import StreamedTensor
from engram_testing import qwen4_tiny_options as tc

# NOTE: Gemma-style norms scale by (1 + weight), so their weights sit near 0; projections
# keep unit-scale activations; the convolutions are far from zero, so that PLE (its value
# projection and its conv) moves the residual streams as much as a layer does.
GAIN_NOISE = 0.1
CONV_STD = 0.5
FP8_ROW_STD = 16.0
FP8_MAX = 448.0
LOGIT_SCALE = 4.0
CHUNK_ROWS = 1 << 20  # rows per generator of a streamed shard: fixed, so bytes are too
Draw = Callable[[torch.Generator], torch.Tensor]


@dataclass(frozen=True)
class TableShard:
    """One row shard of a PLE table: normal values, times ``FP8_ROW_STD`` and clamped for
    e4m3 (the table's ``weight_scale`` brings them back near 1), or bf16."""

    shape: tuple[int, int]
    fp8: bool

    @property
    def dtype(self) -> torch.dtype:
        return torch.float8_e4m3fn if self.fp8 else torch.bfloat16

    def __call__(self, g: torch.Generator) -> torch.Tensor:
        return self._values(torch.randn(self.shape, generator=g))

    def chunks(self, seed: int, key: int) -> Iterator[np.ndarray]:
        """The shard's bytes, ``CHUNK_ROWS`` rows at a time, each chunk from a generator
        seeded by ``(seed, key, chunk)``: never whole in memory."""
        rows, width = self.shape
        for index, start in enumerate(range(0, rows, CHUNK_ROWS)):
            state = np.random.SeedSequence((seed, key, index)).generate_state(1, np.uint64)
            g = torch.Generator().manual_seed(int(state[0]))
            normal = torch.randn((min(CHUNK_ROWS, rows - start), width), generator=g)
            yield self._values(normal).view(torch.uint8).numpy()

    def _values(self, normal: torch.Tensor) -> torch.Tensor:
        if not self.fp8:
            return normal.to(torch.bfloat16)
        return (normal * FP8_ROW_STD).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def _normal(shape: tuple[int, ...], std: float, mean: float = 0.0, dtype=torch.bfloat16) -> Draw:
    return lambda g: (torch.randn(shape, generator=g) * std + mean).to(dtype)


def _linear(rows: int, cols: int) -> Draw:
    return _normal((rows, cols), 1.0 / math.sqrt(cols))


def _gain(width: int) -> Draw:
    return _normal((width,), GAIN_NOISE)


def _hyper_connection(prefix: str, *, combine: bool) -> dict[str, Draw]:
    width, rank = tc.HC * tc.HIDDEN, int(tc.TinyQwen4Options().text_config["hc_lowrank"])
    specs = {
        f"{prefix}.hc_norm.weight": _gain(width),
        f"{prefix}.input_mix_weight_down.weight": _linear(rank, width),
        f"{prefix}.input_mix_weight_up.weight": _linear(width, rank),
    }
    if combine:
        specs[f"{prefix}.block_inject_weight.weight"] = _linear(tc.HC, width)
    return specs


def _moe(prefix: str) -> dict[str, Draw]:
    hidden, width = tc.HIDDEN, tc.MOE_WIDTH
    specs = {f"{prefix}.gate.weight": _linear(tc.EXPERTS, hidden)}
    for expert in [*(f"experts.{e}" for e in range(tc.EXPERTS)), "shared_expert"]:
        specs[f"{prefix}.{expert}.gate_proj.weight"] = _linear(width, hidden)
        specs[f"{prefix}.{expert}.up_proj.weight"] = _linear(width, hidden)
        specs[f"{prefix}.{expert}.down_proj.weight"] = _linear(hidden, width)
    specs[f"{prefix}.shared_expert_gate.weight"] = _linear(1, hidden)
    return specs


def _gated_deltanet(prefix: str) -> dict[str, Draw]:
    hidden, heads = tc.HIDDEN, tc.LIN_V_HEADS
    qkv = 2 * tc.LIN_K_HEADS * tc.LIN_K_DIM + heads * tc.LIN_V_DIM
    return {
        f"{prefix}.in_proj_qkv.weight": _linear(qkv, hidden),
        f"{prefix}.in_proj_z.weight": _linear(heads * tc.LIN_V_DIM, hidden),
        f"{prefix}.in_proj_b.weight": _linear(heads, hidden),
        f"{prefix}.in_proj_a.weight": _linear(heads, hidden),
        f"{prefix}.conv1d.weight": _normal((qkv, 1, tc.CONV), CONV_STD),
        f"{prefix}.dt_bias": _normal((heads,), GAIN_NOISE),
        f"{prefix}.A_log": lambda g: torch.empty(heads).uniform_(1, 16, generator=g).log(),
        f"{prefix}.norm.weight": _normal((tc.LIN_V_DIM,), GAIN_NOISE, mean=1.0),
        f"{prefix}.out_proj.weight": _linear(hidden, heads * tc.LIN_V_DIM),
    }


def _attention(prefix: str) -> dict[str, Draw]:
    hidden, q_width, kv_width = tc.HIDDEN, tc.HEADS * tc.HEAD_DIM, tc.KV_HEADS * tc.HEAD_DIM
    return {
        # NOTE: the query projection carries each head's output gate after its query
        f"{prefix}.q_proj.weight": _linear(2 * q_width, hidden),
        f"{prefix}.k_proj.weight": _linear(kv_width, hidden),
        f"{prefix}.v_proj.weight": _linear(kv_width, hidden),
        f"{prefix}.o_proj.weight": _linear(hidden, q_width),
        f"{prefix}.q_norm.weight": _gain(tc.HEAD_DIM),
        f"{prefix}.k_norm.weight": _gain(tc.HEAD_DIM),
    }


def _ple(prefix: str, options: tc.TinyQwen4Options, ple_index: int) -> dict[str, Draw]:
    width = tc.HC * tc.HIDDEN
    sizes = options.head_sizes(ple_index)
    offsets = [sum(sizes[:h]) for h in range(len(sizes))]
    rows = options.table_rows(ple_index)
    step = math.ceil(rows / options.split_ngram_parts)
    row_width = tc.PLE_DIM // options.ngram_heads
    # NOTE: upstream keeps token * multiplier below 2**63 with this bound
    half_bound = ((1 << 63) - 1) // tc.VOCAB // 2
    table = f"{prefix}.ple_embedding.ngram_embedding"
    specs: dict[str, Draw] = {
        f"{prefix}.ple_embedding.layer_multipliers": lambda g: (
            2 * torch.randint(0, half_bound, (tc.NGRAM,), generator=g) + 1
        ),
        f"{prefix}.ple_embedding.ngram_heads_vocab_sizes": lambda g: torch.tensor(sizes),
        f"{prefix}.ple_embedding.ngram_heads_offsets": lambda g: torch.tensor(offsets),
        f"{prefix}.key_proj.weight": _linear(width, tc.PLE_DIM),
        f"{prefix}.value_proj.weight": _linear(tc.HIDDEN, tc.PLE_DIM),
        f"{prefix}.norm_key.weight": _gain(width),
        f"{prefix}.norm_query.weight": _gain(width),
        f"{prefix}.norm_conv.weight": _gain(width),
        f"{prefix}.conv1d.weight": _normal((width, 1, tc.CONV), CONV_STD),
    }
    for k in range(options.split_ngram_parts):
        shape = (min(step, rows - k * step), row_width)
        specs[f"{table}.shard_{k}.weight"] = TableShard(shape, options.ple_dtype == "fp8")
    if options.ple_dtype == "fp8":
        # NOTE: a power of two times k/8 is exact in bf16, and never 1
        specs[f"{table}.weight_scale"] = lambda g: torch.tensor(
            [(9 + int(torch.randint(0, 8, (1,), generator=g))) / 8 / FP8_ROW_STD],
            dtype=torch.bfloat16,
        )
    return specs


def weight_specs(options: tc.TinyQwen4Options) -> dict[str, Draw]:
    """Every tensor's name and how it is drawn."""
    model = tc.PREFIX.rstrip(".")
    specs: dict[str, Draw] = {
        f"{model}.embed_tokens.weight": _normal((tc.VOCAB, tc.HIDDEN), 1.0),
        # NOTE: logits of unit scale would be near uniform over 2,000 ids (best-to-second
        # gaps of a few hundredths); this scale makes greedy choices clear
        "lm_head.weight": _normal((tc.VOCAB, tc.HIDDEN), LOGIT_SCALE / math.sqrt(tc.HIDDEN)),
        **_hyper_connection(f"{model}.hyper_connection_mixer", combine=False),
    }
    ple_index = {layer_id - 1: i for i, layer_id in enumerate(sorted(options.ple_layer_ids))}
    for layer, kind in enumerate(tc.LAYER_TYPES):
        prefix = f"{model}.layers.{layer}"
        specs |= _hyper_connection(f"{prefix}.attn_hyper_connection", combine=True)
        specs |= _hyper_connection(f"{prefix}.mlp_hyper_connection", combine=True)
        specs |= _moe(f"{prefix}.mlp")
        if kind == "linear_attention":
            specs |= _gated_deltanet(f"{prefix}.linear_attn")
        else:
            specs |= _attention(f"{prefix}.self_attn")
        if layer in ple_index:
            specs |= _ple(f"{prefix}.ple", options, ple_index[layer])
    return specs


def draw_weights(options: tc.TinyQwen4Options) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(options.seed)
    return {
        name: draw(generator).contiguous() for name, draw in sorted(weight_specs(options).items())
    }


def streamed_tensors(options: tc.TinyQwen4Options) -> list[StreamedTensor]:
    """The checkpoint's tensors in sorted-name order, for tables of many GiB: every other
    tensor drawn from the one seeded generator (in memory: they are small), each table
    shard streamed from generators of its own. NOTE: not ``draw_weights``' values (its
    generator never draws the shards), but the same options give the same bytes."""
    generator = torch.Generator().manual_seed(options.seed)
    out, shards = [], 0
    for name, draw in sorted(weight_specs(options).items()):
        if isinstance(draw, TableShard):
            chunks = lambda d=draw, key=shards: d.chunks(options.seed, key)  # noqa: E731
            out.append(StreamedTensor(name, draw.dtype, draw.shape, chunks))
            shards += 1
        else:
            out.append(StreamedTensor.of(name, draw(generator)))
    return out
