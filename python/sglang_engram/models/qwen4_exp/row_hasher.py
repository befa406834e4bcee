"""Qwen3.8-Flash-Next's read-ahead hash: the core library's PLE hash
(:mod:`engram.ple_hashing`) with the constants the loaded model holds."""

from __future__ import annotations

from typing import Any

import torch

from engram.ple_hashing import PleLayerHash, PleRowHasher


def loaded_row_hasher(model: Any) -> PleRowHasher | None:
    """The PLE hash with the constants the checkpoint carried, as ``model`` loaded them
    (``layer_multipliers``, ``ngram_heads_vocab_sizes``, ``ngram_heads_offsets``);
    ``None``: it has no PLE layer."""
    from sglang.srt.models.qwen4_exp import Qwen4ExpNGramEmbedding

    embeddings = [m for m in model.modules() if isinstance(m, Qwen4ExpNGramEmbedding)]
    if not embeddings:
        return None
    layers = []
    for embedding in sorted(embeddings, key=lambda m: m.ple_layer_index):
        layer_id = (
            sorted({int(i) for i in embedding.config.ple_layer_ids})[embedding.ple_layer_index] - 1
        )
        layers.append(
            PleLayerHash(
                layer_id,
                embedding.layer_multipliers.detach().to("cpu", torch.int64),
                embedding.ngram_heads_vocab_sizes.detach().to("cpu", torch.int64),
                embedding.ngram_heads_offsets.detach().to("cpu", torch.int64),
            )
        )
    first = embeddings[0]
    return PleRowHasher(layers, first.ngram_size, first.eos_token_id)
