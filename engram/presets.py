"""Engram config fields of released models, for checks, benchmarks and examples."""

from __future__ import annotations

from types import MappingProxyType

# NOTE: N = 4 and H = 8 give the 24 columns per layer and the four multipliers per
# layer of the released checkpoint; the prime sums equal engram_num_embeddings.
DSV41_FLASH = MappingProxyType(
    {
        "engram_layer_ids": (1, 14),
        "engram_num_embeddings": (384_006_168, 384_016_682),
        "engram_max_ngram_size": 4,
        "engram_vocab_size": 16_000_000,
        "engram_n_heads": 8,
        "engram_head_dim": 256,
        "engram_pad_token_id": 2,
        "engram_compressed_vocab_size": 99_092,
    }
)
