"""STAND-INS (plain torch) for ``sgl_kernel``'s CPU causal depthwise conv1d ops, the
short convolution of a Gated DeltaNet layer over ``[q | k | v]``.

A request's conv state (``conv_states[slot]``, ``[dim, state_len]``, ``state_len >=
width - 1``) holds the last ``state_len`` inputs it saw, oldest first; a prefill
without ``has_initial_state`` starts from zeros. Slot ``pad_slot_id`` is padding: not read, not written.
NOTE: ``weight`` is read as ``[dim, width]``. The real ops' ``is_vnni`` argument says the
weight was packed for AMX, which SGLang only does on a CPU with AMX, where the real
package is present and this stand-in is never installed; it is accepted and ignored.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _convolve(
    window: torch.Tensor, steps: int, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool
) -> torch.Tensor:
    """Depthwise causal conv of the last ``steps`` positions of ``window [..., dim, n]``
    (earlier positions are their history) -> ``[..., dim, steps]``, float32."""
    width = weight.shape[-1]
    taps = window[..., -(width - 1 + steps) :].unfold(-1, width, 1)  # [..., dim, steps, width]
    out = (taps * weight.float().unsqueeze(-2)).sum(-1)
    if bias is not None:
        out = out + bias.float().unsqueeze(-1)
    return F.silu(out) if silu else out


def causal_conv1d_fwd_cpu(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    conv_states: torch.Tensor | None,
    query_start_loc: torch.Tensor | None,
    cache_indices: torch.Tensor | None,
    has_initial_state: torch.Tensor | None,
    silu_activation: bool,
    pad_slot_id: int,
    is_vnni: bool,
) -> torch.Tensor:
    """STAND-IN for ``sgl_kernel::causal_conv1d_fwd_cpu``: ``x`` is ``[dim, tokens]``, the
    requests' tokens one after another (``query_start_loc``); returns ``[dim, tokens]``
    and leaves each request's last inputs in its slot of ``conv_states``."""
    dim, tokens = x.shape
    state_len = weight.shape[-1] - 1 if conv_states is None else conv_states.shape[-1]
    starts = [0, tokens] if query_start_loc is None else query_start_loc.tolist()
    out = torch.zeros_like(x)
    for n in range(len(starts) - 1):
        lo, hi = starts[n], starts[n + 1]
        slot = n if cache_indices is None else int(cache_indices[n])
        if slot == pad_slot_id or hi == lo:
            continue
        start = torch.zeros(dim, state_len, dtype=torch.float32)
        if conv_states is not None and has_initial_state is not None and bool(has_initial_state[n]):
            start = conv_states[slot].float()
        window = torch.cat([start, x[:, lo:hi].float()], dim=-1)
        out[:, lo:hi] = _convolve(window, hi - lo, weight, bias, silu_activation).to(x.dtype)
        if conv_states is not None:
            conv_states[slot] = window[:, -state_len:].to(conv_states.dtype)
    return out


def causal_conv1d_update_cpu(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu_activation: bool,
    cache_seqlens: torch.Tensor | None,
    conv_state_indices: torch.Tensor | None,
    pad_slot_id: int,
    is_vnni: bool,
) -> torch.Tensor:
    """STAND-IN for ``sgl_kernel::causal_conv1d_update_cpu``: ``x`` is ``[batch, dim]`` (one
    new token per request) or ``[batch, dim, L]``; returns the same shape and shifts the
    new inputs into each request's slot of ``conv_state``. Padding rows come back zero."""
    if cache_seqlens is not None:
        raise NotImplementedError("causal_conv1d_update_cpu stand-in: no circular conv state")
    steps = x.unsqueeze(-1) if x.dim() == 2 else x
    batch = steps.shape[0]
    slots = torch.arange(batch) if conv_state_indices is None else conv_state_indices.long().cpu()
    live = slots != pad_slot_id
    out = torch.zeros_like(steps)
    if bool(live.any()):
        rows, used = live.nonzero().squeeze(-1), slots[live]
        window = torch.cat([conv_state[used].float(), steps[rows].float()], dim=-1)
        out[rows] = _convolve(window, steps.shape[-1], weight, bias, silu_activation).to(x.dtype)
        conv_state[used] = window[..., -conv_state.shape[-1] :].to(conv_state.dtype)
    return out.squeeze(-1) if x.dim() == 2 else out
