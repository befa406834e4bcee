"""The tiny model's hasher: our layout and token map inside SGLang's per-request slots.

It is an ``EngramHasher`` (upstream's class) so SGLang's scheduler treats it as the
model's Engram hasher: it allocates the per-request-slot history, refreshes it after
prefix-cache hits, chunked prefill and retraction, and seeds it for a PD decode
worker from the prompt it received. The hash constants (primes, offsets,
multipliers, compressed token map) come from our core library; the forward pass is
upstream's, which hashes exactly like ``engram.NgramHasher`` (see the tests).
"""

from __future__ import annotations

import logging

import torch
from sglang.srt.layers.engram import EngramHasher
from torch import nn

from engram.hashing import NgramHasher
from engram.spec import EngramSpec

logger = logging.getLogger(__name__)


class SlotHasher(EngramHasher):
    """Hash ids ``[T, n_layers, (N - 1) * H]`` of a forward batch."""

    def __init__(
        self, spec: EngramSpec, token_map: torch.Tensor, *, image_token_id: int | None = None
    ):
        # NOTE: upstream's __init__ needs a tokenizer and rebuilds the token map from it
        # (uncached, on every start and rank); ours comes from the core library (cached,
        # and any token map for the tests), so only nn.Module's init runs here and the
        # attributes upstream's methods read are set below. test_upstream_classes compares
        # them with an upstream-built hasher's, so one a new SGLang adds fails there.
        nn.Module.__init__(self)
        reference = NgramHasher(spec, token_map, image_token_id=image_token_id)
        self.reference = reference
        self.spec = spec
        self.max_ngram_size = spec.max_ngram_size
        self.pad_id = reference.pad_compressed
        # NOTE: SGLang builds the model inside ``with torch.device(<gpu>)`` and never
        # moves it afterwards; the reference's tensors are host tensors, so they are
        # copied to that device here (upstream's hasher creates its buffers there).
        device = torch.get_default_device()
        for name in ("token_map", "multipliers", "primes", "offsets"):
            self.register_buffer(
                name, getattr(reference, name).to(device, copy=True), persistent=False
            )
        self.image_token_id = image_token_id
        self.history: torch.Tensor | None = None
        self.pad_row = 0
        self._cpu_hash_params = None

    @classmethod
    def for_tokenizer(cls, spec: EngramSpec, tokenizer: object) -> SlotHasher:
        from engram import build_token_map

        token_map, _ = build_token_map(tokenizer)
        return cls(spec, token_map)


def load_serving_tokenizer() -> object:
    """The HF tokenizer SGLang serves with (the token map needs its normalizers)."""
    from sglang.srt.runtime_context import get_model, get_serving
    from sglang.srt.utils.hf_transformers.tokenizer import get_tokenizer

    return get_tokenizer(
        get_serving().tokenizer_path,
        tokenizer_mode=get_serving().tokenizer_mode,
        trust_remote_code=get_model().trust_remote_code,
        revision=get_model().revision,
        tokenizer_backend="huggingface",
    )
