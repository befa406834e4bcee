"""Qwen3.8-Flash-Next's PLE n-gram hash: token ids -> PLE row ids (torch only).

A token's rows depend on a window of ``ngram_size`` raw token ids ending at it: the
token and its predecessors, where a predecessor at or before an EOS inside the window
reads as ``eos_token_id``, and the start of a request reads as EOS too (upstream keeps
``ngram_size - 1`` ids of context per request, filled with EOS). For order k (2..N)
``mix = XOR over p < k of token[-p] * multiplier[p]`` (int64, wrapping), and head h of
that order reads row ``mix mod vocab_size[h] + offset[h]``: ``(N - 1) * heads`` rows per
token and PLE layer.

NOTE: the constants are the ones the checkpoint carries (``layer_multipliers``,
``ngram_heads_vocab_sizes``, ``ngram_heads_offsets`` are loaded buffers that override
what upstream would compute): the plugin's SSD read-ahead reads them from the model
after its weights loaded, ``python -m engram.profile`` from the checkpoint's files
(:mod:`engram.profile.ple_model`). Upstream SGLang's ``Qwen4ExpNGramEmbedding`` is the
oracle (``test/plugin/test_qwen4_hash.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PleLayerHash:
    """One PLE layer's loaded hash constants (CPU int64 tensors)."""

    layer_id: int
    multipliers: torch.Tensor  # [ngram_size]
    vocab_sizes: torch.Tensor  # [(ngram_size - 1) * heads]
    offsets: torch.Tensor  # [(ngram_size - 1) * heads]


class PleRowHasher:
    """Global PLE row ids from token ids alone (the plugin's read-ahead takes it as its
    ``RowHasher``; the profile counts through :meth:`hash_batch`)."""

    def __init__(self, layers: Sequence[PleLayerHash], ngram_size: int, eos_token_id: int):
        self.layers = tuple(layers)
        self.layer_ids = tuple(layer.layer_id for layer in self.layers)
        self.window = ngram_size
        self.eos_token_id = eos_token_id
        self._multipliers = torch.stack([layer.multipliers for layer in self.layers])
        self._vocab_sizes = torch.stack([layer.vocab_sizes for layer in self.layers])
        self._offsets = torch.stack([layer.offsets for layer in self.layers])

    @property
    def heads_per_ngram(self) -> int:
        return self._vocab_sizes.shape[1] // (self.window - 1)

    def windows(self, tokens: torch.Tensor, context: Sequence[int] = ()) -> torch.Tensor:
        """``[T, ngram_size]`` windows of ``tokens`` (a request's next tokens) after its
        ``context`` (its last ``ngram_size - 1`` ids so far; EOS where there are fewer),
        the EOS rule applied: column ``n - 1`` is the token, column ``n - 1 - s`` its
        s-th predecessor."""
        n = self.window
        head = list(context)[-(n - 1) :] if n > 1 else []
        pad = [self.eos_token_id] * (n - 1 - len(head))
        stream = torch.cat([torch.tensor(pad + head, dtype=torch.int64), tokens.long()])
        windows = stream.unfold(0, n, 1).clone()
        # NOTE: a predecessor is replaced once any id after it (up to, not including,
        # the token itself) is an EOS; an EOS predecessor reads as EOS either way.
        eos = windows[:, 1 : n - 1] == self.eos_token_id
        after_eos = eos.flip(1).cummax(1).values.flip(1)
        windows[:, : n - 2] = windows[:, : n - 2].masked_fill(after_eos, self.eos_token_id)
        return windows

    def rows_of_windows(self, windows: torch.Tensor) -> torch.Tensor:
        """Row ids ``[T, layers, (n - 1) * heads]`` of ``[T, n]`` windows (EOS rule applied)."""
        n = self.window
        # shifted[:, p] is the token p places back: the window read right to left
        shifted = windows.flip(1)
        mixes = []
        mix = shifted[:, None, 0] * self._multipliers[None, :, 0]
        for order in range(2, n + 1):
            mix = torch.bitwise_xor(
                mix, shifted[:, None, order - 1] * self._multipliers[None, :, order - 1]
            )
            mixes.append(mix)
        per_head = torch.stack(mixes, dim=2).repeat_interleave(self.heads_per_ngram, dim=2)
        return torch.remainder(per_head, self._vocab_sizes[None]) + self._offsets[None]

    def prompt_rows(self, token_ids: Sequence[int]) -> torch.Tensor:
        tokens = torch.as_tensor(list(token_ids), dtype=torch.int64)
        return self.rows_of_windows(self.windows(tokens))

    def step_rows(self, tails: Sequence[Sequence[int]]) -> torch.Tensor:
        windows = [
            self.windows(torch.tensor(tail[-1:], dtype=torch.int64), tail[:-1]) for tail in tails
        ]
        return self.rows_of_windows(torch.cat(windows))

    def hash_batch(
        self, token_ids: torch.Tensor, seq_lens: torch.Tensor, histories: torch.Tensor
    ) -> torch.Tensor:
        """Row ids ``[T, layers, (n - 1) * heads]`` of a ragged batch, as
        ``engram.hashing.NgramHasher.hash_batch`` takes one: ``token_ids`` [T] the
        pieces back to back, ``seq_lens`` [B] their lengths, ``histories`` [B, n - 1] the
        tokens before each (``-1`` where there is none: the start reads as EOS)."""
        pieces = torch.split(token_ids.long(), seq_lens.tolist())
        windows = [
            self.windows(piece, [int(t) for t in history if t >= 0])
            for piece, history in zip(pieces, histories.tolist(), strict=True)
            if piece.numel()
        ]
        if not windows:
            return torch.empty((0, len(self.layers), self._offsets.shape[1]), dtype=torch.int64)
        return self.rows_of_windows(torch.cat(windows))
