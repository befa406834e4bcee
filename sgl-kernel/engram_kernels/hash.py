"""Fused n-gram hashing of ragged batches, bit-identical to ``engram.NgramHasher``.

``extend`` mode: ``token_ids`` [T] hold the requests' chunks back to back and
``starts`` [B + 1] their offsets (request b owns ``starts[b]:starts[b + 1]``); tokens
outside ``starts[0]:starts[B]`` are padding. ``decode`` mode: one token per request,
``token_ids`` [B]; a negative token marks a padding request. Histories [R, N - 1] hold
each request's previous tokens, oldest first, -1 where it has none; ``slots`` [B] maps
requests to history rows (default: row b). Padding rows get row ids -1, which the
gather turns into zero rows, so fixed (captured) shapes need no host logic.

With ``update_history`` the histories advance past the batch in place: in decode mode
inside the hashing kernel, in extend mode by a second launch on the same stream.
Nothing synchronises with the host, and no shape depends on data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from engram.errors import EngramInputError
from engram.hashing import NgramHasher
from engram_kernels._jit import block, grid_for, kernel, launch_device, on_device

HASH_BLOCK = block(32, 128)
ADVANCE_BLOCK = block(16, 64)
MODES = ("extend", "decode")


@dataclass(frozen=True)
class HashTables:
    """A hasher's constants on one device."""

    token_map: torch.Tensor  # [V] int64 compressed ids
    multipliers: torch.Tensor  # [L, N] int64
    primes: torch.Tensor  # [L, N - 1, H] int64
    offsets: torch.Tensor  # [L, (N - 1) * H] int64
    pad_compressed: int
    image_token_id: int | None

    @classmethod
    def from_hasher(cls, hasher: NgramHasher, device: torch.device | str) -> HashTables:
        def put(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=torch.int64).contiguous()

        return cls(
            put(hasher.token_map),
            put(hasher.multipliers),
            put(hasher.primes),
            put(hasher.offsets),
            hasher.pad_compressed,
            hasher.image_token_id,
        )

    @property
    def n_layers(self) -> int:
        return self.multipliers.shape[0]

    @property
    def window(self) -> int:
        return self.multipliers.shape[1]

    @property
    def n_heads(self) -> int:
        return self.primes.shape[2]

    @property
    def n_cols(self) -> int:
        return self.offsets.shape[1]


@kernel
def _hash_kernel(
    tok_ptr, n_tokens, starts_ptr, n_reqs, search_steps, hist_ptr, hist_stride, slots_ptr,
    map_ptr, vocab, mult_ptr, primes_ptr, offsets_ptr, out_ptr, pad_comp, image_id,
    N: tl.constexpr, L: tl.constexpr, L_P2: tl.constexpr, H: tl.constexpr,
    H_P2: tl.constexpr, N1_P2: tl.constexpr, BLOCK: tl.constexpr, DECODE: tl.constexpr,
    UPDATE: tl.constexpr, HAS_SLOTS: tl.constexpr, HAS_IMAGE: tl.constexpr,
):  # fmt: skip
    C: tl.constexpr = (N - 1) * H
    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_range = t < n_tokens
    if DECODE:
        req = t
        pos = t * 0
        real = in_range & (tl.load(tok_ptr + t, mask=in_range, other=-1) >= 0)
    else:
        # Request of each token: the last b < B with starts[b] <= t (binary search).
        req = t * 0
        for step in range(search_steps):
            probe = req + (1 << (search_steps - 1 - step))
            ok = probe < n_reqs
            first = tl.load(starts_ptr + probe, mask=ok, other=0)
            req = tl.where(ok & (first <= t), probe, req)
        pos = t - tl.load(starts_ptr + req, mask=in_range, other=0)
        real = in_range & (t >= tl.load(starts_ptr)) & (t < tl.load(starts_ptr + n_reqs))
    if HAS_SLOTS:
        row = tl.load(slots_ptr + req, mask=real, other=0).to(tl.int64)
    else:
        row = req
    hist = hist_ptr + row * hist_stride
    lay = tl.arange(0, L_P2)
    head = tl.arange(0, H_P2)
    lh_ok = (lay < L)[:, None] & (head < H)[None, :]
    acc = tl.full([BLOCK, L_P2], 0, tl.int64)
    blocked = ~real
    for s in tl.static_range(N):
        # Shift s reads s tokens back: inside the chunk, else from the history row.
        in_chunk = pos >= s
        raw = tl.load(tok_ptr + t - s, mask=real & in_chunk, other=-1).to(tl.int64)
        older = tl.load(hist + (N - 1) + pos - s, mask=real & ~in_chunk, other=-1)
        raw = tl.where(in_chunk, raw, older)
        blocked = blocked | (raw < 0)
        if HAS_IMAGE:
            blocked = blocked | (raw == image_id)
        comp = tl.load(map_ptr + raw, mask=~blocked & (raw < vocab), other=pad_comp)
        comp = tl.where(blocked, pad_comp, comp)
        mult = tl.load(mult_ptr + lay * N + s, mask=lay < L, other=0)
        acc = acc ^ (comp[:, None] * mult[None, :])
        if s > 0:
            col = (s - 1) * H + head[None, :]
            prime = tl.load(primes_ptr + lay[:, None] * C + col, mask=lh_ok, other=1)
            first_row = tl.load(offsets_ptr + lay[:, None] * C + col, mask=lh_ok, other=0)
            ids = acc[:, :, None] % prime[None, :, :] + first_row[None, :, :]
            ids = tl.where(real[:, None, None], ids, -1)
            dst = out_ptr + t[:, None, None] * (L * C) + lay[None, :, None] * C + col[None, :, :]
            tl.store(dst, ids, mask=in_range[:, None, None] & lh_ok[None, :, :])
    if DECODE and UPDATE:
        j = tl.arange(0, N1_P2)[None, :]
        kept = tl.load(hist[:, None] + j + 1, mask=real[:, None] & (j < N - 2), other=-1)
        new = tl.load(tok_ptr + t, mask=real, other=-1).to(tl.int64)
        kept = tl.where(j == N - 2, new[:, None], kept)
        # NOTE: other threads of this program read these history rows above.
        tl.debug_barrier()
        tl.store(hist[:, None] + j, kept, mask=real[:, None] & (j < N - 1))


@kernel
def _advance_kernel(
    tok_ptr, starts_ptr, n_reqs, hist_ptr, hist_stride, slots_ptr,
    N1: tl.constexpr, N1_P2: tl.constexpr, BLOCK: tl.constexpr, HAS_SLOTS: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    b_ok = b < n_reqs
    start = tl.load(starts_ptr + b, mask=b_ok, other=0).to(tl.int64)
    length = tl.load(starts_ptr + b + 1, mask=b_ok, other=0).to(tl.int64) - start
    live = b_ok & (length > 0)
    if HAS_SLOTS:
        row = tl.load(slots_ptr + b, mask=live, other=0).to(tl.int64)
    else:
        row = b
    hist = hist_ptr + row[:, None] * hist_stride
    j = tl.arange(0, N1_P2)[None, :]
    k = length[:, None] - N1 + j  # index into the chunk; < 0 reaches into the history
    ok = live[:, None] & (j < N1)
    from_chunk = tl.load(tok_ptr + start[:, None] + k, mask=ok & (k >= 0), other=-1)
    from_hist = tl.load(hist + N1 + k, mask=ok & (k < 0), other=-1)
    new = tl.where(k >= 0, from_chunk.to(tl.int64), from_hist)
    tl.debug_barrier()
    tl.store(hist + j, new, mask=ok)


def hash_ids(
    tables: HashTables,
    token_ids: torch.Tensor,
    histories: torch.Tensor,
    *,
    mode: str = "extend",
    starts: torch.Tensor | None = None,
    slots: torch.Tensor | None = None,
    update_history: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Row ids ``[T, L, (N - 1) * H]`` int64 of a batch (module docstring for the
    layout), equal to ``NgramHasher.hash_batch`` on the real tokens and -1 on padding."""
    if mode not in MODES:
        raise EngramInputError(f"hash mode must be one of {', '.join(MODES)}, got {mode!r}")
    decode = mode == "decode"
    _check_int("token_ids", token_ids, 1)
    _check_int("histories", histories, 2)
    n1 = tables.window - 1
    if histories.shape[1] != n1 or histories.dtype != torch.int64 or histories.stride(1) != 1:
        raise EngramInputError(
            f"histories must be int64 [requests, {n1}] with contiguous rows, got "
            f"{histories.dtype} {list(histories.shape)}"
        )
    if decode:
        if starts is not None:
            raise EngramInputError("decode mode takes one token per request: pass no starts")
        n_reqs = token_ids.numel()
        starts = token_ids  # unused placeholder pointer
    else:
        if starts is None:
            raise EngramInputError("extend mode needs starts [requests + 1]")
        _check_int("starts", starts, 1)
        n_reqs = starts.numel() - 1
        if n_reqs < 1:
            raise EngramInputError("starts must hold at least 2 offsets (one request)")
    rows_needed = n_reqs if slots is None else histories.shape[0]
    if slots is not None:
        _check_int("slots", slots, 1)
        if slots.numel() != n_reqs:
            raise EngramInputError(f"slots must have one entry per request ({n_reqs})")
    elif histories.shape[0] != n_reqs:
        raise EngramInputError(
            f"histories has {histories.shape[0]} rows for {n_reqs} requests; pass slots "
            "to map requests to history rows"
        )
    n = token_ids.numel()
    shape = (n, tables.n_layers, tables.n_cols)
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=token_ids.device)
    elif out.dtype != torch.int64 or tuple(out.shape) != shape or not out.is_contiguous():
        raise EngramInputError(f"out must be a contiguous int64 tensor of shape {list(shape)}")
    device = launch_device(token_ids, histories, starts, slots, out, tables.token_map)
    if device.type == "cpu":
        _check_values(tables, token_ids, histories, starts, slots, decode, rows_needed)
    token_ids = token_ids.contiguous()
    starts = starts.contiguous()
    slot_arg = slots.contiguous() if slots is not None else starts
    image = tables.image_token_id
    with on_device(device):
        _hash_kernel[grid_for(n, HASH_BLOCK)](
            token_ids, n, starts, n_reqs, max(0, (n_reqs - 1).bit_length()),
            histories, histories.stride(0), slot_arg, tables.token_map,
            tables.token_map.numel(), tables.multipliers, tables.primes, tables.offsets, out,
            tables.pad_compressed, -1 if image is None else image,
            N=tables.window, L=tables.n_layers, L_P2=triton.next_power_of_2(tables.n_layers),
            H=tables.n_heads, H_P2=triton.next_power_of_2(tables.n_heads),
            N1_P2=triton.next_power_of_2(n1), BLOCK=HASH_BLOCK, DECODE=decode,
            UPDATE=update_history and decode, HAS_SLOTS=slots is not None, HAS_IMAGE=image is not None,
        )  # fmt: skip
        if update_history and not decode:
            _advance_kernel[grid_for(n_reqs, ADVANCE_BLOCK)](
                token_ids, starts, n_reqs, histories, histories.stride(0), slot_arg,
                N1=n1, N1_P2=triton.next_power_of_2(n1), BLOCK=ADVANCE_BLOCK,
                HAS_SLOTS=slots is not None,
            )  # fmt: skip
    return out


def _check_int(name: str, t: torch.Tensor, ndim: int) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.int32, torch.int64):
        raise EngramInputError(f"{name} must be an int32 or int64 tensor")
    if t.ndim != ndim:
        raise EngramInputError(f"{name} must be {ndim}-D, got shape {list(t.shape)}")


def _check_values(
    tables: HashTables,
    token_ids: torch.Tensor,
    histories: torch.Tensor,
    starts: torch.Tensor,
    slots: torch.Tensor | None,
    decode: bool,
    history_rows: int,
) -> None:
    """Value checks, for CPU batches only (on a GPU they would synchronise)."""
    vocab = tables.token_map.numel()
    if not decode:
        if bool((starts[1:] < starts[:-1]).any()) or int(starts[0]) < 0:
            raise EngramInputError("starts must be non-negative and non-decreasing")
        if int(starts[-1]) > token_ids.numel():
            raise EngramInputError(
                f"starts end at {int(starts[-1])} but there are {token_ids.numel()} tokens"
            )
        real = token_ids[int(starts[0]) : int(starts[-1])]
    else:
        real = token_ids[token_ids >= 0]
    if real.numel() and (int(real.min()) < 0 or int(real.max()) >= vocab):
        raise EngramInputError(f"token ids must lie in [0, {vocab}) (the vocabulary)")
    if histories.numel() and (int(histories.min()) < -1 or int(histories.max()) >= vocab):
        raise EngramInputError(f"history token ids must be -1 or lie in [0, {vocab})")
    if slots is not None and slots.numel():
        if int(slots.min()) < 0 or int(slots.max()) >= history_rows:
            raise EngramInputError(f"slots must index the {history_rows} history rows")
        if torch.unique(slots).numel() != slots.numel():
            raise EngramInputError("slots must be distinct (each request owns its history row)")
