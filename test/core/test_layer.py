"""The reference Engram layer: V4.1 gate bit-exact with upstream, off = identity, and the
paper variant equal to DeepSeek's public demo (biases, epsilons, gate, causal ShortConv)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engram.errors import EngramConfigError
from engram.fp8 import dequantize_rows, quantize_rows
from engram.layer import EngramLayerConfig, EngramState, PaperEngram, make_engram, paper_gate
from engram.tables import create_table
from test.core.upstream import upstream_engram

HC, HIDDEN, N, HEADS, HEAD_DIM = 4, 64, 3, 2, 32
N_COLS = (N - 1) * HEADS
IMAGE_TOKEN = 7


def _config(variant: str, image_token_id: int | None = None) -> EngramLayerConfig:
    return EngramLayerConfig(
        hidden_size=HIDDEN,
        hc_mult=HC,
        n_cols=N_COLS,
        head_dim=HEAD_DIM,
        max_ngram_size=N,
        variant=variant,
        image_token_id=image_token_id,
    )


def _table(placement: str = "hbm", rows: int = 97):
    weight, scale = quantize_rows(torch.randn(rows, HEAD_DIM) * 3)
    return create_table(placement, weight, scale, head_dim=HEAD_DIM, num_rows=rows)


def _randomise(module: torch.nn.Module) -> None:
    for name, p in module.named_parameters():
        noise = torch.randn(p.shape)
        p.data.copy_(noise / p.shape[-1] ** 0.5 if p.ndim > 1 and "conv" not in name else noise)


def _inputs(t: int, rows: int = 97):
    x = (torch.randn(t, HC, HIDDEN) * torch.rand(t, HC, 1) * 4).bfloat16()
    return x, torch.randint(0, rows, (t, N_COLS))


@pytest.fixture(scope="module")
def upstream_gate():
    return upstream_engram().engram_gate


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_v41_gate_is_bit_exact_with_upstream(upstream_gate, dtype):
    from engram.layer import v41_gate

    t = int(torch.randint(1, 300, ()))
    x = (torch.randn(t, HC, HIDDEN) * 3).to(dtype)
    kv = (torch.randn(t, (HC + 1) * HIDDEN) * 2).to(dtype)
    q_w = (1 + 0.3 * torch.randn(HC, HIDDEN)).bfloat16()
    k_w = (1 + 0.3 * torch.randn(HC, HIDDEN)).bfloat16()
    ids = torch.randint(0, 12, (t,))
    eps = float(torch.empty(()).uniform_(1e-7, 1e-5))
    ours = v41_gate(x, kv, q_w, k_w, eps)
    theirs = upstream_gate(x, kv, q_w, k_w, eps, 1e-6)
    assert ours.dtype == dtype
    assert torch.equal(ours, theirs)
    assert not torch.equal(ours, x)
    keep = ids == IMAGE_TOKEN
    ours = v41_gate(x, kv, q_w, k_w, eps, keep)
    assert torch.equal(ours, upstream_gate(x, kv, q_w, k_w, eps, 1e-6, ids, IMAGE_TOKEN))


def test_v41_module_looks_up_projects_and_gates(upstream_gate):
    table = _table()
    module = make_engram(_config("v41", IMAGE_TOKEN), table)
    _randomise(module)
    t = int(torch.randint(8, 64, ()))
    x, row_ids = _inputs(t)
    ids = torch.randint(0, 12, (t,))
    ids[int(torch.randint(0, t, ()))] = IMAGE_TOKEN
    out = module(x, row_ids, input_ids=ids)
    # The rows of each token, concatenated in column order, go through wkv.
    rows = dequantize_rows(table.weight[row_ids], table.scale[row_ids]).flatten(-2)
    kv = F.linear(rows, module.wkv.weight)
    expected = upstream_gate(
        x, kv, module.q_weight, module.k_weight, module.config.eps, 1e-6, ids, IMAGE_TOKEN
    )
    assert torch.equal(out, expected)
    image = ids == IMAGE_TOKEN
    assert torch.equal(out[image], x[image])
    assert not torch.equal(out[~image], x[~image])
    assert table.counters.rows_requested == t * N_COLS


@pytest.mark.parametrize("variant", ["v41", "paper"])
def test_off_is_the_identity(variant):
    table = create_table("off", None, None, num_rows=97, head_dim=HEAD_DIM)
    module = make_engram(_config(variant), table)
    _randomise(module)
    x, row_ids = _inputs(int(torch.randint(1, 40, ())))
    assert module(x, row_ids, state=EngramState()) is x
    assert table.counters.lookups == 0


def test_paper_variant_is_causal_with_dilated_conv():
    module = make_engram(_config("paper"), _table())
    _randomise(module)
    t = 24
    x, row_ids = _inputs(t)
    out = module(x, row_ids)
    assert out.shape == (t, HC, HIDDEN) and out.dtype == torch.bfloat16
    p = int(torch.randint(0, t - 3 * N, ()))
    x2, rows2 = x.clone(), row_ids.clone()
    x2[p] = (torch.randn(HC, HIDDEN) * 3).bfloat16()
    rows2[p] = (rows2[p] + 1) % 97
    changed = (module(x2, rows2) != out).flatten(1).any(-1)
    # Token p reaches exactly the positions p + j * N (kernel 4, dilation N), never earlier.
    assert changed.nonzero().flatten().tolist() == [p + j * N for j in range(4)]


def test_paper_variant_chunks_match_one_pass():
    module = make_engram(_config("paper"), _table())
    _randomise(module)
    t = int(torch.randint(12, 40, ()))
    x, row_ids = _inputs(t)
    whole = module(x, row_ids)
    state, parts, start = EngramState(), [], 0
    for size in (1, 5, 1, t):
        end = min(start + size, t)
        parts.append(module(x[start:end], row_ids[start:end], state=state))
        start = end
    torch.testing.assert_close(torch.cat(parts), whole)
    assert state.conv is not None and state.conv.shape == (3 * N, HC, HIDDEN)


def demo_engram(module: PaperEngram, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """DeepSeek's demo Engram layer (engram_demo_v1.py) built from torch.nn parts with
    ``module``'s parameters, plus the residual: ``x`` [T, hc, D], ``rows`` [T, input_dim]."""
    cfg, t = module.config, x.shape[0]
    hc, hidden, k, dil = cfg.hc_mult, cfg.hidden_size, cfg.conv_kernel, cfg.conv_dilation

    def linear(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
        layer = nn.Linear(weight.shape[1], weight.shape[0])
        layer.weight.data.copy_(weight)
        layer.bias.data.copy_(bias)
        return layer

    def rms_norm(weight: torch.Tensor, eps: float | None = None) -> nn.RMSNorm:
        norm = nn.RMSNorm(hidden, eps=eps)  # eps None: the input dtype's machine epsilon
        norm.weight.data.copy_(weight)
        return norm

    gates = []
    for i in range(hc):
        key = rms_norm(module.key_norm[i])(linear(module.key_proj[i], module.key_bias[i])(rows))
        query = rms_norm(module.query_norm[i])(x[:, i])
        d = (key * query).sum(-1) / hidden**0.5
        gates.append((d.abs().clamp_min(1e-6).sqrt() * d.sign()).sigmoid())
    value = (
        torch.stack(gates, 1)[..., None]
        * linear(module.value_proj, module.value_bias)(rows)[:, None]
    )
    channels = hc * hidden
    conv = nn.Conv1d(
        channels, channels, k, groups=channels, bias=False, padding=(k - 1) * dil, dilation=dil
    )
    conv.weight.data.copy_(module.conv_weight.reshape(channels, 1, k))
    normed = torch.cat([rms_norm(module.conv_norm[i], 1e-5)(value[:, i]) for i in range(hc)], -1)
    short = F.silu(conv(normed.T[None])[0, :, :t].T).view(t, hc, hidden)
    return x + value + short


@pytest.mark.parametrize("magnitude", [1.0, 1e-4])
def test_paper_variant_equals_deepseeks_demo(magnitude):
    # At 1e-4 the mean squares fall below both epsilons, so a wrong eps shows.
    table = _table()
    module = make_engram(_config("paper"), table, dtype=torch.float32)
    _randomise(module)
    for name in ("key_proj", "key_bias", "value_proj", "value_bias"):
        getattr(module, name).data.mul_(magnitude)
    t = int(torch.randint(3 * N + 2, 40, ()))
    x, row_ids = _inputs(t)
    x = x.float() * magnitude
    x[int(torch.randint(0, t, ()))] = 0  # a zero query: the gate's dot product is exactly 0
    rows = dequantize_rows(table.weight[row_ids], table.scale[row_ids]).flatten(-2).float()
    with torch.no_grad():
        expected = demo_engram(module, x, rows)
    torch.testing.assert_close(module(x, row_ids), expected)


def test_paper_variant_uses_its_biases():
    module = make_engram(_config("paper"), _table(), dtype=torch.float32)
    _randomise(module)
    x, row_ids = _inputs(int(torch.randint(4, 30, ())))
    out = module(x.float(), row_ids)
    for name in ("key_bias", "value_bias"):
        bias = getattr(module, name)
        assert bias.shape == ((HC, HIDDEN) if name == "key_bias" else (HIDDEN,))
        saved = bias.data.clone()
        bias.data.add_(torch.randn(bias.shape))
        assert not torch.equal(module(x.float(), row_ids), out), name
        bias.data.copy_(saved)


def test_paper_gate_is_one_half_at_zero_and_odd_around_it():
    assert PaperEngram.GATE_NORM_EPS == torch.finfo(torch.float32).eps
    assert PaperEngram.CONV_NORM_EPS == 1e-5
    d = torch.rand(50) * 4 + 1e-3
    assert torch.equal(paper_gate(torch.tensor([0.0, -0.0])), torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(paper_gate(d) + paper_gate(-d), torch.ones(50))
    torch.testing.assert_close(paper_gate(d), torch.sigmoid(d.sqrt()))


def test_unknown_variant_is_named():
    with pytest.raises(EngramConfigError, match="unknown engram_variant 'v3'.*v41, paper"):
        _config("v3")
