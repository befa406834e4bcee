"""STAND-INS (plain torch) for ``sgl_kernel``'s CPU gated delta rule ops: the recurrence
of a Gated DeltaNet layer, over a prefill (chunked) and over decode steps.

Per value head, with a state ``S [Dk, Dv]`` that starts from the request's slot of the
state pool (stored ``[Hv, Dv, Dk]``, as SGLang's pool and its GPU kernels keep it),
each token does::

    S = exp(g) * S;  u = beta * (v - S^T k);  S = S + k u^T;  o = S^T (q * Dk**-0.5)

with ``q`` and ``k`` L2-normalised (eps 1e-6) and shared by ``Hv / Hk`` value heads.
Slot ``-1`` is padding: it starts from zeros and is not written back. Everything is
computed in float32; outputs take ``v``'s dtype, the pool keeps its own.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 64
L2_EPS = 1e-6


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.square().sum(dim=-1, keepdim=True) + L2_EPS)


def _per_value_head(x: torch.Tensor, value_heads: int) -> torch.Tensor:
    """``[..., Hk, D]`` -> ``[..., Hv, D]``: value head ``h`` reads key head ``h // (Hv/Hk)``."""
    return x.repeat_interleave(value_heads // x.shape[-2], dim=-2)


def _load_states(pool: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Slots' states as ``[N, Hv, Dk, Dv]`` float32; padding slots are zero."""
    states = torch.zeros(
        (slots.shape[0], pool.shape[1], pool.shape[3], pool.shape[2]), dtype=torch.float32
    )
    live = slots >= 0
    states[live] = pool[slots[live]].float().transpose(-1, -2)
    return states


def _store_states(pool: torch.Tensor, slots: torch.Tensor, states: torch.Tensor) -> None:
    live = slots >= 0
    pool[slots[live]] = states[live].transpose(-1, -2).to(pool.dtype)


def _chunk_step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of ``c`` tokens for every head at once (``q``/``k [Hv, c, Dk]``,
    ``v [Hv, c, Dv]``, ``g``/``beta [Hv, c]``, ``state [Hv, Dk, Dv]``): the outputs
    ``[Hv, c, Dv]`` and the state after the chunk, in the WY form (one triangular solve
    replaces the token loop)."""
    c = q.shape[1]
    cum = g.cumsum(dim=-1)
    later = torch.ones(c, c, dtype=torch.bool).tril()  # i >= j
    decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(~later, float("-inf")).exp()
    strictly = (beta.unsqueeze(-1) * (k @ k.transpose(-1, -2)) * decay).tril(-1)
    eye = torch.eye(c).expand_as(strictly)
    solve = torch.linalg.solve_triangular(eye + strictly, eye, upper=False, unitriangular=True)
    w = solve @ (beta.unsqueeze(-1) * cum.exp().unsqueeze(-1) * k)
    u = solve @ (beta.unsqueeze(-1) * v) - w @ state
    out = (q * cum.exp().unsqueeze(-1)) @ state + ((q @ k.transpose(-1, -2)) * decay) @ u
    tail = (cum[:, -1:] - cum).exp().unsqueeze(-1)
    state = cum[:, -1].exp()[:, None, None] * state + (k * tail).transpose(-1, -2) @ u
    return out, state


def chunk_gated_delta_rule_cpu(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor,
    output_final_state: bool,
    cu_seqlens: torch.Tensor,
    head_first: bool,
    use_qk_l2norm_in_kernel: bool,
    initial_state_indices: torch.Tensor,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """STAND-IN for ``sgl_kernel::chunk_gated_delta_rule_cpu`` (a prefill): ``query``/``key``
    ``[1, T, Hk, Dk]``, ``value [1, T, Hv, Dv]``, ``g``/``beta [1, T, Hv]``, the requests
    one after another (``cu_seqlens``). Each request starts from and updates its slot
    (``initial_state_indices``) of the pool ``initial_state [slots, Hv, Dv, Dk]`` in place.
    Returns the outputs ``[1, T, Hv, Dv]`` and the final states ``[N, Hv, Dv, Dk]``
    (float32; SGLang's CPU path reads the pool, not these)."""
    if head_first:
        raise NotImplementedError("chunk_gated_delta_rule_cpu stand-in: head_first layout")
    heads = value.shape[2]
    q, k = query[0].float(), key[0].float()
    if use_qk_l2norm_in_kernel:
        q, k = _unit(q), _unit(k)
    q = _per_value_head(q * q.shape[-1] ** -0.5, heads).transpose(0, 1)  # [Hv, T, Dk]
    k = _per_value_head(k, heads).transpose(0, 1)
    v = value[0].float().transpose(0, 1)  # [Hv, T, Dv]
    gates, betas = g[0].float().t(), beta[0].float().t()  # [Hv, T]
    slots = initial_state_indices.long().cpu()
    states = _load_states(initial_state, slots)
    out = torch.zeros_like(v)
    bounds = cu_seqlens.tolist()
    for n in range(len(bounds) - 1):
        for lo in range(bounds[n], bounds[n + 1], CHUNK):
            hi = min(lo + CHUNK, bounds[n + 1])
            part = slice(lo, hi)
            out[:, part], states[n] = _chunk_step(
                states[n], q[:, part], k[:, part], v[:, part], gates[:, part], betas[:, part]
            )
    _store_states(initial_state, slots, states)
    return out.transpose(0, 1).unsqueeze(0).to(value.dtype), states.transpose(-1, -2)


def fused_sigmoid_gating_delta_rule_update_cpu(
    A_log: torch.Tensor,  # noqa: N803 - the op's argument name
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor,
    initial_state_indices: torch.Tensor,
    cu_seqlens: torch.Tensor,
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> torch.Tensor:
    """STAND-IN for ``sgl_kernel::fused_sigmoid_gating_delta_rule_update_cpu`` (decode):
    the gates of ``fused_gdn_gating_cpu`` formed per token from ``a [T, Hv]`` and
    ``b [T, Hv]``, then the recurrence token by token. ``q``/``k [1, T, Hk, Dk]``,
    ``v [1, T, Hv, Dv]``; request ``n`` owns tokens ``cu_seqlens[n]:cu_seqlens[n+1]`` and
    pool slot ``initial_state_indices[n]``, updated in place. Returns ``[T, 1, Hv, Dv]``."""
    heads = v.shape[2]
    qs, ks = q[0].float(), k[0].float()
    if use_qk_l2norm_in_kernel:
        qs, ks = _unit(qs), _unit(ks)
    qs = _per_value_head(qs * qs.shape[-1] ** -0.5, heads)  # [T, Hv, Dk]
    ks = _per_value_head(ks, heads)
    vs = v[0].float()  # [T, Hv, Dv]
    x = a.float() + dt_bias.float()
    decays = torch.exp(
        -torch.exp(A_log.float()) * F.softplus(x, beta=softplus_beta, threshold=softplus_threshold)
    )
    writes = torch.sigmoid(b.float())
    slots = initial_state_indices.long().cpu()
    states = _load_states(initial_state_source, slots)  # [N, Hv, Dk, Dv]
    starts = cu_seqlens[:-1].long().cpu()
    lengths = cu_seqlens[1:].long().cpu() - starts
    out = torch.zeros_like(vs)
    for step in range(int(lengths.max()) if lengths.numel() else 0):
        rows = (lengths > step).nonzero().squeeze(-1)
        t = starts[rows] + step
        s = states[rows] * decays[t][..., None, None]
        u = writes[t][..., None] * (vs[t] - (s * ks[t][..., None]).sum(-2))
        s = s + ks[t][..., None] * u[..., None, :]
        out[t] = (s * qs[t][..., None]).sum(-2)
        states[rows] = s
    _store_states(initial_state_source, slots, states)
    return out.unsqueeze(1).to(v.dtype)
