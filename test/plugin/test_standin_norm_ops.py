"""The ``sgl_kernel`` stand-in's norm, gate and input-split ops against plain formulas
written here (float64), on random inputs drawn fresh each run."""

from __future__ import annotations

import random

import torch
from sglang_engram.integration.kernel_standin.ops import gdn_inputs, norms

EPS = 1e-6


def _close(got: torch.Tensor, want: torch.Tensor, tol: float = 2e-2) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol)


def _rms_rows(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    x = x.double()
    out = torch.empty_like(x)
    for i, row in enumerate(x):
        out[i] = row / (row.pow(2).sum() / row.numel() + EPS) ** 0.5 * scale.double()
    return out


def _fresh(outputs: tuple[torch.Tensor, ...], *inputs: torch.Tensor) -> bool:
    """No output shares memory with an input (a custom op's outputs may not alias)."""
    held = {t.untyped_storage().data_ptr() for t in inputs}
    return all(o.untyped_storage().data_ptr() not in held for o in outputs)


def _heads() -> tuple[int, int, int, int]:
    return (
        random.randint(1, 7),
        random.choice((1, 2, 4)),
        random.choice((8, 16, 32)),
        random.randint(1, 9),
    )


def test_qk_gemma_rmsnorm_normalises_every_head_with_one_plus_weight():
    kv, group, dim, tokens = _heads()
    qkv = torch.randn(tokens, (kv * group + 2 * kv) * dim, dtype=torch.bfloat16) * 3
    q, k = qkv[:, : kv * group * dim], qkv[:, kv * group * dim : (kv * group + kv) * dim]
    wq, wk = torch.randn(dim, dtype=torch.bfloat16), torch.randn(dim, dtype=torch.bfloat16)
    q_out, k_out = norms.fused_qk_gemma_rmsnorm_cpu(q, k, wq, wk, EPS, dim)
    assert q_out.dtype == torch.bfloat16 and q_out.shape == q.shape and k_out.shape == k.shape
    _close(q_out.reshape(-1, dim), _rms_rows(q.reshape(-1, dim), 1 + wq.double()))
    _close(k_out.reshape(-1, dim), _rms_rows(k.reshape(-1, dim), 1 + wk.double()))


def test_qk_gemma_rmsnorm_with_gate_splits_each_heads_query_and_gate():
    kv, group, dim, tokens = _heads()
    heads = kv * group
    per_head = torch.randn(tokens, heads, 2, dim, dtype=torch.bfloat16)
    k = torch.randn(tokens, kv * dim, dtype=torch.bfloat16)
    wq, wk = torch.randn(dim, dtype=torch.bfloat16), torch.randn(dim, dtype=torch.bfloat16)
    q_out, k_out, gate = norms.fused_qk_gemma_rmsnorm_with_gate_cpu(
        per_head.reshape(tokens, -1), k, wq, wk, EPS, dim, heads
    )
    assert q_out.shape == (tokens * heads, dim) and k_out.shape == (tokens * kv, dim)
    assert torch.equal(gate, per_head[:, :, 1].reshape(-1, dim))
    assert _fresh((q_out, k_out, gate), per_head, k)
    one = per_head[:1, :1].reshape(1, -1)  # one token, one head: every slice is contiguous
    outs = norms.fused_qk_gemma_rmsnorm_with_gate_cpu(one, k[:1, :dim], wq, wk, EPS, dim, 1)
    assert _fresh(outs, one, k)
    _close(q_out, _rms_rows(per_head[:, :, 0].reshape(-1, dim), 1 + wq.double()))
    _close(k_out, _rms_rows(k.reshape(-1, dim), 1 + wk.double()))


def test_gated_rmsnorm_is_norm_times_weight_times_silu_gate():
    rows, dim = random.randint(1, 40), random.choice((16, 64, 128))
    x = torch.randn(rows, dim, dtype=torch.bfloat16) * 4
    z = torch.randn(rows, dim, dtype=torch.bfloat16) * 2
    w = torch.rand(dim, dtype=torch.bfloat16) + 0.5
    zd = z.double()
    want = _rms_rows(x, w.double()) * zd / (1 + torch.exp(-zd))
    _close(norms.fused_rmsnorm_gated_cpu(x, w, z, EPS), want)
    _close(norms.fused_rmsnorm_gated_cpu(x, w, None, EPS), _rms_rows(x, w.double()))


def test_sigmoid_mul_multiplies_in_place_through_a_strided_gate():
    tokens, heads, dim = random.randint(1, 9), random.randint(1, 6), random.choice((8, 32))
    both = torch.randn(tokens, heads, 2 * dim, dtype=torch.bfloat16)
    gate = both[..., dim:]  # the strided view SGLang hands over
    x = torch.randn(tokens, heads * dim, dtype=torch.bfloat16)
    before = x.clone()
    assert norms.fused_sigmoid_mul_cpu(x, gate) is None
    want = before.double() / (1 + torch.exp(-gate.double().reshape(tokens, -1)))
    _close(x, want)


def test_qkvzba_split_takes_the_contiguous_blocks_apart():
    hk, ratio, dk, dv, tokens = (
        random.randint(1, 4),
        random.choice((1, 2, 4)),
        16,
        8,
        random.randint(1, 7),
    )
    hv = hk * ratio
    q, k = torch.randn(tokens, hk * dk), torch.randn(tokens, hk * dk)
    v, z = torch.randn(tokens, hv * dv), torch.randn(tokens, hv * dv)
    b, a = torch.randn(tokens, hv), torch.randn(tokens, hv)
    qkvz = torch.cat([q, k, v, z], dim=1).to(torch.bfloat16)
    ba = torch.cat([b, a], dim=1).to(torch.bfloat16)
    mixed, z_out, b_out, a_out = gdn_inputs.fused_qkvzba_split_reshape_cat_contiguous_cpu(
        qkvz, ba, hk, hv, dk, dv
    )
    assert torch.equal(mixed, torch.cat([q, k, v], 1).to(torch.bfloat16))
    assert torch.equal(z_out, z.to(torch.bfloat16).reshape(tokens, hv, dv))
    assert torch.equal(b_out, b.to(torch.bfloat16)) and torch.equal(a_out, a.to(torch.bfloat16))
    assert all(t.is_contiguous() for t in (mixed, z_out, b_out, a_out))
    assert _fresh((mixed, z_out, b_out, a_out), qkvz, ba)
    one = gdn_inputs.fused_qkvzba_split_reshape_cat_contiguous_cpu(qkvz[:1], ba[:1], hk, hv, dk, dv)
    assert _fresh(one, qkvz, ba)


def test_gdn_gating_is_minus_exp_alog_times_softplus_and_a_sigmoid():
    tokens, heads = random.randint(1, 30), random.choice((2, 4, 8))
    a_log = torch.rand(heads) * 3
    a = torch.randn(tokens, heads, dtype=torch.bfloat16) * 15  # some above the threshold
    b = torch.randn(tokens, heads, dtype=torch.bfloat16) * 3
    dt_bias = torch.randn(heads, dtype=torch.bfloat16)
    g, beta = gdn_inputs.fused_gdn_gating_cpu(a_log, a, b, dt_bias)
    x = a.double() + dt_bias.double()
    softplus = torch.where(x <= 20, torch.log1p(torch.exp(x.clamp(max=20))), x)
    assert g.dtype == torch.float32 and g.shape == (1, tokens, heads)
    _close(g[0], -torch.exp(a_log.double()) * softplus, tol=1e-4)
    assert beta.dtype == b.dtype and beta.shape == (1, tokens, heads)
    _close(beta[0], 1 / (1 + torch.exp(-b.double())))


def test_shared_expert_gate_scales_by_a_per_token_sigmoid_and_adds():
    tokens, hidden = random.randint(1, 20), random.choice((16, 64))
    h = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    w = torch.randn(hidden, dtype=torch.bfloat16) / hidden**0.5
    shared = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    addend = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    gate = torch.stack([1 / (1 + torch.exp(-(row.double() * w.double()).sum())) for row in h])
    want = gate[:, None] * shared.double()
    _close(norms.gate_shared_expert(h, w, shared), want)
    _close(norms.gate_shared_expert(h, w, shared, addend), want + addend.double())
