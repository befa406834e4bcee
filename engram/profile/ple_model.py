"""Qwen3.8-Flash-Next's PLE hash as its server hashes: constants from the checkpoint.

Upstream's ``Qwen4ExpNGramEmbedding`` computes three buffers per PLE layer when it is
built (``layer_multipliers`` from SplitMix64 of the config's ``seed`` and the layer's
index, ``ngram_heads_vocab_sizes`` the primes from ``ngram_vocab_size_base``,
``ngram_heads_offsets`` their running sums) and then loads each one the checkpoint
holds over it. :func:`ple_hasher` does the same: a buffer the checkpoint's safetensors
files hold is read from there, one they lack is computed as upstream computes it. The
table's rows are upstream's too: the config's prime sizes, padded
(:meth:`~engram.ssd.checkpoint_formats.ple_config.PleConfig.num_rows`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from engram.errors import EngramConfigError
from engram.ple_hashing import PleLayerHash, PleRowHasher
from engram.ssd.checkpoint_formats.ple_config import PleConfig
from engram.ssd.safetensors_files import TensorEntry, TensorReader, checkpoint_entries

BUFFER = re.compile(
    r"^model\.(?:language_model\.)?layers\.(\d+)\.ple\.ple_embedding\."
    r"(layer_multipliers|ngram_heads_vocab_sizes|ngram_heads_offsets)$"
)
DEFAULT_SEED = 1234  # upstream's, when the config has no ``seed``
_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_LAYER_STEP = 10007  # upstream's seed step from one PLE layer to the next


def is_ple_config(hf_config: Mapping[str, Any]) -> bool:
    """Whether ``config.json`` declares PLE layers (Qwen3.8-Flash-Next)."""
    return bool(PleConfig.from_config(dict(hf_config)).ple_layer_ids)


def ple_hasher(model_dir: Path, hf_config: Mapping[str, Any]) -> tuple[PleRowHasher, list[int]]:
    """The PLE hash of the checkpoint in ``model_dir`` and each PLE table's rows, in
    layer order (0-based decoder layers, as table directories name them)."""
    config = dict(hf_config)
    ple = PleConfig.from_config(config)
    nested = config.get("text_config")
    text = nested if isinstance(nested, dict) else config
    eos = text.get("eos_token_id", config.get("eos_token_id"))
    vocab = text.get("vocab_size")
    if not isinstance(eos, int) or not isinstance(vocab, int):
        raise EngramConfigError(
            f"{model_dir}/config.json gives no integer eos_token_id and vocab_size for its "
            "text model; the PLE hash needs both"
        )
    loaded = _checkpoint_buffers(model_dir)
    layers = []
    for index, layer in enumerate(ple.layer_ids):
        sizes = ple.head_sizes(layer)
        computed = {
            "layer_multipliers": upstream_multipliers(
                ple.ngram_size, vocab, int(text.get("seed", DEFAULT_SEED)), index
            ),
            "ngram_heads_vocab_sizes": torch.tensor(sizes, dtype=torch.int64),
            "ngram_heads_offsets": torch.tensor([sum(sizes[:h]) for h in range(len(sizes))]),
        }
        values = {
            name: loaded.get((layer, name), default).to(torch.int64)
            for name, default in computed.items()
        }
        layers.append(
            PleLayerHash(
                layer,
                values["layer_multipliers"],
                values["ngram_heads_vocab_sizes"],
                values["ngram_heads_offsets"],
            )
        )
    rows = [ple.num_rows(layer) for layer in ple.layer_ids]
    return PleRowHasher(layers, ple.ngram_size, eos), rows


def upstream_multipliers(size: int, vocab_size: int, seed: int, layer_index: int) -> torch.Tensor:
    """Upstream's ``_build_layer_multipliers``: odd SplitMix64 draws below the bound that
    keeps ``token * multiplier`` within int64 for tokens below ``vocab_size``."""
    half_bound = max(1, ((1 << 63) - 1) // max(vocab_size, 1) // 2)
    base = seed + _LAYER_STEP * layer_index
    values = [
        2 * (_splitmix64((base + _GAMMA * (i + 1)) & _MASK64) % half_bound) + 1 for i in range(size)
    ]
    return torch.tensor(values, dtype=torch.int64)


def _splitmix64(x: int) -> int:
    x = (x + _GAMMA) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _checkpoint_buffers(model_dir: Path) -> dict[tuple[int, str], torch.Tensor]:
    """(layer, buffer name) -> the checkpoint's tensor, for the PLE buffers it holds."""
    found: dict[tuple[int, str], TensorEntry] = {}
    for name, entry in checkpoint_entries(model_dir).items():
        match = BUFFER.match(name)
        if match:
            found[(int(match.group(1)), match.group(2))] = entry
    reader = TensorReader()
    return {key: reader.whole(entry) for key, entry in found.items()}
