"""Small Engram configs, tables and model directories for the plugin tests."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

from engram.fp8 import quantize_rows
from engram.spec import EngramSpec

TINY_ARCH = "EngramQwen3ForCausalLM"


def engram_fields(
    layer_ids: tuple[int, ...] = (1, 3),
    n: int = 4,
    heads: int = 4,
    head_dim: int = 64,
    vocab_start: int | None = None,
) -> dict[str, Any]:
    """``engram_*`` config fields whose table sizes match their primes."""
    start = vocab_start or random.randint(300, 900)
    probe = EngramSpec(layer_ids, (1,) * len(layer_ids), n, start, heads, head_dim)
    return {
        "engram_layer_ids": list(layer_ids),
        "engram_num_embeddings": list(probe.prime_sums),
        "engram_max_ngram_size": n,
        "engram_vocab_size": start,
        "engram_n_heads": heads,
        "engram_head_dim": head_dim,
        "engram_pad_token_id": 2,
    }


def tiny_config(**engram: Any) -> dict[str, Any]:
    """The tiny model's config.json (brief's layout) with fresh Engram sizes."""
    return {
        "architectures": [TINY_ARCH],
        "model_type": "engram_qwen3",
        "vocab_size": 512,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "hc_mult": 1,
        "engram_variant": "v41",
        **engram_fields(**engram),
    }


def write_model_dir(path: Path, config: dict[str, Any]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    return path


def random_token_map(vocab: int, compressed: int) -> torch.Tensor:
    """A map onto ``compressed`` ids that uses every one of them."""
    ids = torch.randint(0, compressed, (vocab,))
    ids[torch.randperm(vocab)[:compressed]] = torch.arange(compressed)
    return ids


def random_table(rows: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 weight + ue8m0 scale of random rows (never all zero)."""
    values = torch.randn(rows, head_dim) * torch.exp2(torch.randint(-6, 6, (rows, 1)).float())
    return quantize_rows(values)
