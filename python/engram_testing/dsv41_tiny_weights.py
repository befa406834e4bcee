"""The tiny DeepSeek-V4.1 checkpoint's shape and tensors: its ``config.json`` (four
sliding-window layers, two of them with Engram) and every tensor under the released
checkpoint's names, drawn from one seeded generator in sorted-name order.

The names are DeepSeek-V4's own (``embed``, ``layers.L.attn.wq_a``,
``layers.L.ffn.experts.E.w1``, ``layers.L.hc_attn_fn``, ``layers.L.engram.embed.weight``,
...), which upstream's ``load_weights`` renames to its modules; dense weights are bf16,
the hyper-connection and sink parameters fp32, the Engram rows e4m3 with one ue8m0
exponent per 32 values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import torch

from engram.fp8 import E4M3_MAX, FP8_BLOCK
from engram.model.tokenizer import asset_bytes, tokenizer_config
from engram.spec import EngramSpec

# NOTE: DeepSeek's chat special tokens (their default spellings in deepseek_recipe,
# which SGLang's DeepSeek-V4 chat encoder needs in the tokenizer's added vocabulary),
# after the tiny Engram BPE's 2,000 ids; the first two are bos and eos.
CHAT_TOKENS = (
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<think>", "</think>",
    "<｜System｜>", "<｜User｜>", "<｜Assistant｜>", "<｜latest_reminder｜>", "｜DSML｜",
    "<｜deepseek_image｜>", "<｜ref｜>", "<｜/ref｜>", "<｜box｜>", "<｜/box｜>",
    "<｜point｜>", "<｜/point｜>", "<｜polygon｜>", "<｜/polygon｜>",
)  # fmt: skip
BPE_VOCAB = 2000
VOCAB = BPE_VOCAB + len(CHAT_TOKENS)
BOS_TOKEN_ID, EOS_TOKEN_ID = BPE_VOCAB, BPE_VOCAB + 1
HIDDEN = 256
LAYERS = 4
HEADS = 8
HEAD_DIM, NOPE_DIM, ROPE_DIM = 512, 448, 64  # fixed by upstream's pool and backend
Q_LORA, O_LORA, O_GROUPS = 128, 128, 2
EXPERTS, TOPK, MOE_WIDTH = 4, 2, 128
HC = 4
WINDOW = 128  # the backend's SWA_WINDOW
MAX_POSITIONS = 2048
ENGRAM_LAYERS = (1, 2)
ENGRAM_N, ENGRAM_HEADS, ENGRAM_DIM = 4, 4, 64
ENGRAM_VOCAB_BASE = 1000
# NOTE: upstream's build_compressed_token_map of the tokenizer that ships in the
# directory (``tokenizer_json``); the checkpoint test recomputes it with upstream's code.
COMPRESSED_VOCAB = 1542
# NOTE: unit-scale logits over 2,000 ids would leave best-to-second gaps of hundredths;
# at this scale greedy choices stand clear of the CPU's rounding differences.
LOGIT_SCALE = 8.0
GAIN_NOISE = 0.1

Draw = Callable[[torch.Generator], torch.Tensor]


def engram_spec() -> EngramSpec:
    probe = EngramSpec(
        ENGRAM_LAYERS, (1,) * len(ENGRAM_LAYERS), ENGRAM_N, ENGRAM_VOCAB_BASE,
        ENGRAM_HEADS, ENGRAM_DIM,
    )  # fmt: skip
    return EngramSpec(
        ENGRAM_LAYERS, probe.prime_sums, ENGRAM_N, ENGRAM_VOCAB_BASE, ENGRAM_HEADS,
        ENGRAM_DIM, compressed_vocab_size=COMPRESSED_VOCAB,
    )  # fmt: skip


def config() -> dict[str, object]:
    """``config.json``: every DeepSeek-V4 field upstream's V4.1 path reads (it loads the
    file as a DeepSeek-V3 config, whose defaults are not V4's)."""
    spec = engram_spec()
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v41",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "qk_nope_head_dim": NOPE_DIM,
        "qk_rope_head_dim": ROPE_DIM,
        "v_head_dim": HEAD_DIM,
        "kv_lora_rank": HEAD_DIM,
        "q_lora_rank": Q_LORA,
        "o_lora_rank": O_LORA,
        "o_groups": O_GROUPS,
        "intermediate_size": 2 * MOE_WIDTH,
        "moe_intermediate_size": MOE_WIDTH,
        "n_routed_experts": EXPERTS,
        "n_shared_experts": 1,
        "num_experts_per_tok": TOPK,
        "n_group": 1,
        "topk_group": 1,
        "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc",
        "routed_scaling_factor": 1.5,
        "norm_topk_prob": True,
        "num_hash_layers": 0,
        "first_k_dense_replace": 0,
        "hidden_act": "silu",
        # NOTE: every layer sliding-window: the compressed ratios (4, 128, V4.1's 1/2)
        # need CUDA kernels without a CPU stand-in
        "compress_ratios": [0] * LAYERS,
        "sliding_window": WINDOW,
        "window_size": WINDOW,
        "rope_theta": 10000,
        "compress_rope_theta": 160000,
        "max_position_embeddings": MAX_POSITIONS,
        "hc_mult": HC,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "rms_norm_eps": 1e-6,
        # NOTE: read even without a C4 layer (the backend asserts 512 or 1024)
        "index_n_heads": 4,
        "index_head_dim": 128,
        "index_topk": 512,
        "engram_layer_ids": list(spec.layer_ids),
        "engram_num_embeddings": list(spec.num_embeddings),
        "engram_max_ngram_size": spec.max_ngram_size,
        "engram_vocab_size": spec.vocab_size,
        "engram_n_heads": spec.n_heads,
        "engram_head_dim": spec.head_dim,
        "engram_pad_token_id": spec.pad_token_id,
        "engram_compressed_vocab_size": COMPRESSED_VOCAB,
        "num_nextn_predict_layers": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": BOS_TOKEN_ID,
        "eos_token_id": EOS_TOKEN_ID,
    }


def tokenizer_files() -> dict[str, str]:
    """``tokenizer.json`` (the tiny Engram BPE with DeepSeek's chat tokens added) and
    ``tokenizer_config.json``."""
    tokenizer = json.loads(asset_bytes())
    tokenizer["added_tokens"] += [
        {"id": BPE_VOCAB + i, "content": text, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
        for i, text in enumerate(CHAT_TOKENS)
    ]  # fmt: skip
    settings = tokenizer_config(MAX_POSITIONS)
    settings |= {"bos_token": CHAT_TOKENS[0], "eos_token": CHAT_TOKENS[1]}
    return {
        "tokenizer.json": json.dumps(tokenizer, ensure_ascii=False),
        "tokenizer_config.json": json.dumps(settings, indent=2, sort_keys=True) + "\n",
    }


def _normal(shape: tuple[int, ...], std: float, mean: float = 0.0, dtype=torch.bfloat16) -> Draw:
    return lambda g: (torch.randn(shape, generator=g) * std + mean).to(dtype)


def _linear(rows: int, cols: int) -> Draw:
    return _normal((rows, cols), 1.0 / math.sqrt(cols))


def _gain(width: int) -> Draw:
    return _normal((width,), GAIN_NOISE, mean=1.0)


def _hyper_connection(prefix: str) -> dict[str, Draw]:
    mix = (2 + HC) * HC
    return {
        f"{prefix}_fn": _normal(
            (mix, HC * HIDDEN), 1.0 / math.sqrt(HC * HIDDEN), dtype=torch.float32
        ),
        f"{prefix}_base": _normal((mix,), 0.5, dtype=torch.float32),
        f"{prefix}_scale": lambda g: torch.empty(3).uniform_(0.5, 1.5, generator=g),
    }


def _attention(prefix: str) -> dict[str, Draw]:
    return {
        f"{prefix}.wq_a.weight": _linear(Q_LORA, HIDDEN),
        f"{prefix}.q_norm.weight": _gain(Q_LORA),
        f"{prefix}.wq_b.weight": _linear(HEADS * HEAD_DIM, Q_LORA),
        f"{prefix}.wkv.weight": _linear(HEAD_DIM, HIDDEN),
        f"{prefix}.kv_norm.weight": _gain(HEAD_DIM),
        f"{prefix}.wo_a.weight": _linear(O_GROUPS * O_LORA, HEADS * HEAD_DIM // O_GROUPS),
        f"{prefix}.wo_b.weight": _linear(HIDDEN, O_GROUPS * O_LORA),
        f"{prefix}.attn_sink": _normal((HEADS,), 1.0, dtype=torch.float32),
    }


def _expert(prefix: str) -> dict[str, Draw]:
    return {
        f"{prefix}.w1.weight": _linear(MOE_WIDTH, HIDDEN),
        f"{prefix}.w3.weight": _linear(MOE_WIDTH, HIDDEN),
        f"{prefix}.w2.weight": _linear(HIDDEN, MOE_WIDTH),
    }


def _moe(prefix: str) -> dict[str, Draw]:
    specs = {
        f"{prefix}.gate.weight": _linear(EXPERTS, HIDDEN),
        f"{prefix}.gate.bias": _normal((EXPERTS,), 0.1, dtype=torch.float32),
        **_expert(f"{prefix}.shared_experts"),
    }
    for expert in range(EXPERTS):
        specs |= _expert(f"{prefix}.experts.{expert}")
    return specs


# NOTE: e4m3 values of about this spread times 2**-6 (one exponent per 32 values, a few
# powers of two around it) give rows of roughly unit scale.
FP8_SPREAD, EXPONENT = 64.0, 127 - 6


def _engram(prefix: str, rows: int) -> dict[str, Draw]:
    blocks = ENGRAM_DIM // FP8_BLOCK
    return {
        f"{prefix}.wkv.weight": _linear(
            HIDDEN * (HC + 1), (ENGRAM_N - 1) * ENGRAM_HEADS * ENGRAM_DIM
        ),
        f"{prefix}.q_weight": _normal((HC, HIDDEN), GAIN_NOISE, mean=1.0),
        f"{prefix}.k_weight": _normal((HC, HIDDEN), GAIN_NOISE, mean=1.0),
        f"{prefix}.embed.weight": lambda g: (
            (torch.randn((rows, ENGRAM_DIM), generator=g) * FP8_SPREAD)
            .clamp(-E4M3_MAX, E4M3_MAX)
            .to(torch.float8_e4m3fn)
        ),
        f"{prefix}.embed.scale": lambda g: (
            torch.randint(EXPONENT - 2, EXPONENT + 3, (rows, blocks), generator=g)
            .to(torch.uint8)
            .view(torch.float8_e8m0fnu)
        ),
    }


def weight_specs() -> dict[str, Draw]:
    """Every tensor's name and how it is drawn."""
    spec = engram_spec()
    specs: dict[str, Draw] = {
        "embed.weight": _normal((VOCAB, HIDDEN), 1.0),
        "head.weight": _normal((VOCAB, HIDDEN), LOGIT_SCALE / math.sqrt(HIDDEN)),
        "norm.weight": _gain(HIDDEN),
    }
    for layer in range(LAYERS):
        prefix = f"layers.{layer}"
        specs |= _hyper_connection(f"{prefix}.hc_attn")
        specs |= _hyper_connection(f"{prefix}.hc_ffn")
        specs |= {
            f"{prefix}.attn_norm.weight": _gain(HIDDEN),
            f"{prefix}.ffn_norm.weight": _gain(HIDDEN),
        }
        specs |= _attention(f"{prefix}.attn")
        specs |= _moe(f"{prefix}.ffn")
        if layer in spec.layer_ids:
            rows = spec.num_embeddings[spec.layer_ids.index(layer)]
            specs |= _engram(f"{prefix}.engram", rows)
    return specs


def draw_weights(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: draw(generator).contiguous() for name, draw in sorted(weight_specs().items())}
