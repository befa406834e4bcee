"""The ``sgl_kernel`` stand-in's Gated DeltaNet ops (short conv, gated delta rule)
against plain token-by-token formulas written here in float64: ragged batches, requests
with and without a carried state, padding slots, chunk boundaries, GQA heads."""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from sglang_engram.integration.kernel_standin.ops import causal_conv, gated_delta

PAD = -1


def _close(got: torch.Tensor, want: torch.Tensor, tol: float) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol)


# ---- short convolution -----------------------------------------------------------------


def _conv_reference(history: torch.Tensor, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor):
    """Token by token: output t = silu(bias + sum_j w[:, j] * input[t - (width-1) + j])
    over the request's history then its new inputs; returns outputs and the new history."""
    width = w.shape[1]
    seen = [history[:, i].double() for i in range(history.shape[1])]
    outs = []
    for t in range(x.shape[1]):
        seen.append(x[:, t].double())
        acc = bias.double().clone()
        for j in range(width):
            acc += w[:, j].double() * seen[len(seen) - width + j]
        outs.append(acc * torch.sigmoid(acc))
    return torch.stack(outs, dim=1), torch.stack(seen[-history.shape[1] :], dim=1)


def test_causal_conv_prefill_and_decode_follow_the_token_formula():
    dim, width, slots = random.choice((8, 24)), 4, 6
    lengths = [random.randint(1, 12) for _ in range(4)] + [1, 5]
    starts = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    x = torch.randn(dim, starts[-1], dtype=torch.bfloat16)
    w, bias = torch.randn(dim, width, dtype=torch.bfloat16), torch.randn(dim, dtype=torch.bfloat16)
    states = torch.randn(slots + 1, dim, width - 1)
    before = states.clone()
    cache = torch.tensor([3, 0, 5, 1, PAD, 2], dtype=torch.int32)
    carried = torch.tensor([True, False, True, False, True, True])
    out = causal_conv.causal_conv1d_fwd_cpu(
        x, w, bias, states, torch.tensor(starts, dtype=torch.int32), cache, carried, True, PAD, True
    )
    assert out.shape == x.shape and out.dtype == x.dtype
    for n, slot in enumerate(cache.tolist()):
        lo, hi = starts[n], starts[n + 1]
        if slot == PAD:
            assert not out[:, lo:hi].any()
            continue
        history = before[slot] if carried[n] else torch.zeros(dim, width - 1)
        want, state = _conv_reference(history, x[:, lo:hi], w, bias)
        _close(out[:, lo:hi], want, tol=3e-2)
        _close(states[slot], state, tol=1e-2)
    assert torch.equal(states[4], before[4]) and torch.equal(states[6], before[6])

    # a decode step per request (one padding row): the next token after its prompt
    step = torch.randn(len(lengths), dim, dtype=torch.bfloat16)
    after_prefill = states.clone()
    out = causal_conv.causal_conv1d_update_cpu(step, states, w, bias, True, None, cache, PAD, True)
    assert out.shape == step.shape
    for n, slot in enumerate(cache.tolist()):
        if slot == PAD:
            assert not out[n].any()
            continue
        want, state = _conv_reference(after_prefill[slot], step[n].unsqueeze(1), w, bias)
        _close(out[n], want[:, 0], tol=3e-2)
        _close(states[slot], state, tol=1e-2)


# ---- gated delta rule ------------------------------------------------------------------


def _delta_reference(state, q, k, v, g, beta):
    """Token by token, per value head: S = exp(g) S; u = beta (v - S^T k); S += k u^T;
    o = S^T q, with q and k L2-normalised and q scaled by Dk^-1/2. ``state [Hv, Dk, Dv]``,
    ``q``/``k [T, Hk, Dk]``, ``v [T, Hv, Dv]``, ``g``/``beta [T, Hv]``."""
    s = state.double().clone()
    hv, group = v.shape[1], v.shape[1] // q.shape[1]
    outs = torch.zeros(v.shape, dtype=torch.float64)
    for t in range(v.shape[0]):
        for h in range(hv):
            qh, kh = q[t, h // group].double(), k[t, h // group].double()
            qh = qh / (qh.pow(2).sum() + 1e-6).sqrt() / qh.numel() ** 0.5
            kh = kh / (kh.pow(2).sum() + 1e-6).sqrt()
            s[h] *= torch.exp(g[t, h].double())
            u = beta[t, h].double() * (v[t, h].double() - s[h].T @ kh)
            s[h] += torch.outer(kh, u)
            outs[t, h] = s[h].T @ qh
    return outs, s


def _problem(tokens: int):
    hk, group, dk, dv = random.choice((1, 2)), random.choice((1, 2)), 16, random.choice((8, 24))
    hv = hk * group
    q = torch.randn(1, tokens, hk, dk, dtype=torch.bfloat16)
    k = torch.randn(1, tokens, hk, dk, dtype=torch.bfloat16)
    v = torch.randn(1, tokens, hv, dv, dtype=torch.bfloat16)
    return q, k, v, hv, dk, dv


def test_chunked_gated_delta_rule_equals_the_token_recurrence():
    lengths = [1, random.randint(2, 63), random.randint(65, 140), 64]
    starts = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    q, k, v, hv, dk, dv = _problem(starts[-1])
    g = -torch.rand(1, starts[-1], hv) * 0.5
    beta = torch.rand(1, starts[-1], hv, dtype=torch.bfloat16)
    pool = torch.randn(7, hv, dv, dk) * 0.3  # SGLang's layout: [slot, Hv, Dv, Dk]
    slots = torch.tensor([4, 0, 6, 2], dtype=torch.int32)
    pool[0] = 0  # a fresh request's slot
    before = pool.clone()
    out, final = gated_delta.chunk_gated_delta_rule_cpu(
        q, k, v, g, beta, pool, True, torch.tensor(starts, dtype=torch.int32), False, True, slots
    )
    assert out.shape == v.shape and out.dtype == v.dtype and final.shape == (4, hv, dv, dk)
    for n, slot in enumerate(slots.tolist()):
        part = slice(starts[n], starts[n + 1])
        want, state = _delta_reference(
            before[slot].transpose(-1, -2),
            q[0, part],
            k[0, part],
            v[0, part],
            g[0, part],
            beta[0, part],
        )
        _close(out[0, part], want, tol=5e-2)
        _close(pool[slot].transpose(-1, -2), state, tol=1e-3)
        _close(final[n], pool[slot], tol=0)
    for slot in (1, 3, 5):
        assert torch.equal(pool[slot], before[slot])


def test_decode_update_gates_in_kernel_and_continues_a_prefill():
    prompt, steps = random.randint(2, 80), 3
    q, k, v, hv, dk, dv = _problem(prompt + steps)
    a_log, dt_bias = torch.rand(hv) * 2, torch.randn(hv, dtype=torch.bfloat16)
    a = torch.randn(prompt + steps, hv, dtype=torch.bfloat16) * 3
    b = torch.randn(prompt + steps, hv, dtype=torch.bfloat16)
    g = -torch.exp(a_log) * F.softplus(a.float() + dt_bias.float())
    beta = torch.sigmoid(b.float())
    pool = torch.zeros(3, hv, dv, dk)
    slot = torch.tensor([1], dtype=torch.int32)
    gated_delta.chunk_gated_delta_rule_cpu(
        q[:, :prompt], k[:, :prompt], v[:, :prompt], g[None, :prompt], beta[None, :prompt],
        pool, True, torch.tensor([0, prompt], dtype=torch.int32), False, True, slot,
    )  # fmt: skip
    outs = []
    for t in range(prompt, prompt + steps):
        # a batch of two requests: ours, and a padding row that must not be touched
        both = [torch.cat([x[:, t : t + 1]] * 2, dim=1) for x in (q, k, v)]
        out = gated_delta.fused_sigmoid_gating_delta_rule_update_cpu(
            A_log=a_log, dt_bias=dt_bias, q=both[0], k=both[1], v=both[2],
            a=torch.cat([a[t : t + 1]] * 2), b=torch.cat([b[t : t + 1]] * 2),
            initial_state_source=pool, initial_state_indices=torch.tensor([1, PAD], dtype=torch.int32),
            cu_seqlens=torch.tensor([0, 1, 2], dtype=torch.int32), use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
        assert out.shape == (2, 1, hv, dv)
        outs.append(out[0, 0])
    assert not pool[0].any() and not pool[2].any()
    want, state = _delta_reference(torch.zeros(hv, dk, dv), q[0], k[0], v[0], g, beta)
    _close(torch.stack(outs), want[prompt:], tol=5e-2)
    _close(pool[1].transpose(-1, -2), state, tol=1e-3)
