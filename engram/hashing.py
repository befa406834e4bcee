"""N-gram hashing: token ids -> Engram row ids, per request or for ragged batches.

A token at position ``p`` reads the raw tokens at ``p - s`` for shifts ``s = 0..N-1``.
Predecessors before the start of the request are *blocked* and read the compressed pad
id; so is every shift at or past an image token (blocking is cumulative). The n-gram
of order ``n`` xor-folds ``compressed[s] * multiplier[layer][s]`` over ``s < n`` and each
head buckets it by its own prime, offset into the layer's table.

Histories are LongTensors ``[B, N - 1]``, oldest first, with ``-1`` where the request
has no token yet (its start). Hashing a sequence in chunks, carrying the history from
one chunk to the next, equals hashing it whole.
"""

from __future__ import annotations

import torch

from engram.errors import EngramConfigError, EngramInputError
from engram.spec import EngramSpec

NO_TOKEN = -1


class NgramHasher:
    """Hash ids ``[T, n_layers, (N - 1) * H]`` of token streams for one model."""

    def __init__(
        self,
        spec: EngramSpec,
        token_map: torch.Tensor,
        pad_id: int | None = None,
        *,
        image_token_id: int | None = None,
    ):
        """``token_map`` maps raw token ids to compressed ids; ``pad_id`` is the *raw*
        pad token id (default ``spec.pad_token_id``), compressed through the map."""
        token_map = torch.as_tensor(token_map, dtype=torch.int64, device="cpu")
        if token_map.ndim != 1 or token_map.numel() == 0:
            raise EngramInputError("token_map must be a non-empty 1-D tensor of compressed ids")
        compressed_vocab = int(token_map.max()) + 1
        expected = spec.compressed_vocab_size
        if expected is not None and expected != compressed_vocab:
            raise EngramConfigError(
                f"the token map has {compressed_vocab:,} compressed ids but "
                f"engram_compressed_vocab_size is {expected:,}; every hash multiplier "
                "depends on it (wrong tokenizer or tokenizer revision?)"
            )
        pad_id = spec.pad_token_id if pad_id is None else pad_id
        if not 0 <= pad_id < token_map.numel():
            raise EngramInputError(
                f"pad token id {pad_id} is outside the vocabulary (0..{token_map.numel() - 1})"
            )
        self.spec = spec
        self.vocab_size = token_map.numel()
        self.compressed_vocab_size = compressed_vocab
        self.image_token_id = image_token_id
        self.token_map = token_map
        self.pad_compressed = int(token_map[pad_id])
        self.multipliers = spec.multipliers(compressed_vocab)  # [L, N]
        self.primes = spec.primes_tensor  # [L, N-1, H]
        self.offsets = spec.offsets  # [L, C]

    @property
    def window(self) -> int:
        return self.spec.max_ngram_size

    # ---- public API -----------------------------------------------------------------

    def hash(self, token_ids: torch.Tensor, history: torch.Tensor | None = None) -> torch.Tensor:
        """Row ids of one request's chunk. ``history`` holds the up-to ``N - 1`` tokens
        before it (fewer, or ``None``, at the start of the sequence)."""
        token_ids = torch.as_tensor(token_ids, dtype=torch.int64, device="cpu").reshape(-1)
        hist = self.history_row(history)
        lens = torch.tensor([token_ids.numel()], dtype=torch.int64, device="cpu")
        return self.hash_batch(token_ids, lens, hist.unsqueeze(0))

    def hash_batch(
        self, token_ids: torch.Tensor, seq_lens: torch.Tensor, histories: torch.Tensor
    ) -> torch.Tensor:
        """Row ids of a ragged batch: ``token_ids`` [T] holds the requests' chunks back
        to back, ``seq_lens`` [B] their lengths, ``histories`` [B, N - 1] what precedes
        each chunk (``-1`` = nothing)."""
        windows = self.windows(token_ids, seq_lens, histories)
        return self.hash_windows(windows)

    def history_row(self, history: torch.Tensor | list[int] | None) -> torch.Tensor:
        """Left-pad up to ``N - 1`` predecessors with ``-1`` into one history row."""
        n1 = self.window - 1
        row = torch.full((n1,), NO_TOKEN, dtype=torch.int64, device="cpu")
        if history is None:
            return row
        hist = torch.as_tensor(history, dtype=torch.int64, device="cpu").reshape(-1)[-n1:]
        if hist.numel():
            row[n1 - hist.numel() :] = hist
        return row

    # ---- building blocks --------------------------------------------------------------

    def windows(
        self, token_ids: torch.Tensor, seq_lens: torch.Tensor, histories: torch.Tensor
    ) -> torch.Tensor:
        """Raw predecessor windows [T, N]: column ``s`` is the token ``s`` back, -1 when
        blocked (sequence start, or at/behind an image token)."""
        n = self.window
        token_ids, seq_lens, histories = _as_long(token_ids, seq_lens, histories)
        self._check(token_ids, seq_lens, histories)
        combined, pos, _ = _with_histories(token_ids, seq_lens, histories, n - 1)
        win = combined[pos.unsqueeze(1) - torch.arange(n, dtype=torch.int64, device="cpu")]
        blocked = win < 0
        if self.image_token_id is not None:
            blocked |= win == self.image_token_id
        if bool(blocked.any()):
            blocked = blocked.to(torch.int8).cummax(dim=1).values.bool()
            win = win.masked_fill(blocked, NO_TOKEN)
        return win

    def hash_windows(self, windows: torch.Tensor) -> torch.Tensor:
        """Row ids [T, L, (N - 1) * H] of raw windows [T, N] (-1 = blocked)."""
        n, heads, layers = self.window, self.spec.n_heads, self.spec.n_layers
        t = windows.shape[0]
        comp = self.token_map[windows.clamp_min(0)]
        comp.masked_fill_(windows < 0, self.pad_compressed)
        # products[t, l, s] = comp[t, s] * mult[l, s]; never overflows (see spec).
        products = comp.unsqueeze(1) * self.multipliers.unsqueeze(0)
        # folded[:, :, i - 1] is the xor-fold of shifts 0..i: the (i + 1)-gram's hash.
        folded = torch.empty((t, layers, n - 1), dtype=torch.int64, device="cpu")
        torch.bitwise_xor(products[:, :, 0], products[:, :, 1], out=folded[:, :, 0])
        for i in range(2, n):
            torch.bitwise_xor(folded[:, :, i - 2], products[:, :, i], out=folded[:, :, i - 1])
        out = torch.empty((t, layers, n - 1, heads), dtype=torch.int64, device="cpu")
        torch.remainder(folded.unsqueeze(-1), self.primes, out=out)
        out = out.view(t, layers, (n - 1) * heads)
        out += self.offsets
        return out

    def _check(
        self, token_ids: torch.Tensor, seq_lens: torch.Tensor, histories: torch.Tensor
    ) -> None:
        n1 = self.window - 1
        if histories.ndim != 2 or histories.shape != (seq_lens.numel(), n1):
            raise EngramInputError(
                f"histories must be [{seq_lens.numel()}, {n1}] (one row per request), "
                f"got {list(histories.shape)}"
            )
        if seq_lens.numel() and int(seq_lens.min()) < 0:
            raise EngramInputError("seq_lens must be >= 0")
        if int(seq_lens.sum()) != token_ids.numel():
            raise EngramInputError(
                f"seq_lens sum to {int(seq_lens.sum())} but there are {token_ids.numel()} tokens"
            )
        for name, ids, low in (("token id", token_ids, 0), ("history token id", histories, -1)):
            if ids.numel() == 0:
                continue
            lo, hi = int(ids.min()), int(ids.max())
            if lo < low or hi >= self.vocab_size:
                bad = lo if lo < low else hi
                raise EngramInputError(
                    f"{name} {bad} is out of range: the vocabulary has {self.vocab_size} ids"
                )


def _with_histories(
    token_ids: torch.Tensor, seq_lens: torch.Tensor, histories: torch.Tensor, n1: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Concatenate ``[history_b, chunk_b]`` for every request. Returns the flat buffer,
    the index of every chunk token in it, and per request the index one past its end."""
    b = seq_lens.numel()
    req = torch.repeat_interleave(
        torch.arange(b, device="cpu"), seq_lens, output_size=token_ids.numel()
    )
    # each request's history block adds (N - 1) slots before its own chunk
    tok_pos = torch.arange(token_ids.numel(), dtype=torch.int64, device="cpu") + (req + 1) * n1
    ends = torch.cumsum(seq_lens + n1, 0)
    combined = torch.empty(int(ends[-1]) if b else 0, dtype=torch.int64, device="cpu")
    combined[tok_pos] = token_ids
    hist_pos = (ends - seq_lens - n1).unsqueeze(1) + torch.arange(n1, device="cpu")
    combined[hist_pos.reshape(-1)] = histories.reshape(-1)
    return combined, tok_pos, ends


def _as_long(
    token_ids: torch.Tensor, seq_lens: torch.Tensor, histories: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.as_tensor(token_ids, dtype=torch.int64, device="cpu").reshape(-1),
        torch.as_tensor(seq_lens, dtype=torch.int64, device="cpu").reshape(-1),
        torch.as_tensor(histories, dtype=torch.int64, device="cpu"),
    )
