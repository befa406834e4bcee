"""The reference Engram layer: V4.1 gate bit-exact with upstream, off = identity, and the
paper variant's causal ShortConv."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engram.errors import EngramConfigError
from engram.fp8 import dequantize_rows, quantize_rows
from engram.module import EngramModuleConfig, EngramState, make_engram
from engram.tables import create_table
from test.core.upstream import upstream_engram

HC, HIDDEN, N, HEADS, HEAD_DIM = 4, 64, 3, 2, 32
N_COLS = (N - 1) * HEADS
IMAGE_TOKEN = 7


def _config(variant: str, image_token_id: int | None = None) -> EngramModuleConfig:
    return EngramModuleConfig(
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
    from engram.module import v41_gate

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


def test_unknown_variant_is_named():
    with pytest.raises(EngramConfigError, match="unknown engram_variant 'v3'.*v41, paper"):
        _config("v3")
