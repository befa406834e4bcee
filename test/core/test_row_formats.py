"""Row formats: sizes, packing from checkpoint tensors, and dequantisation.

The table-scaled formats are checked here against upstream's expression over every
input (``F.embedding`` of the stored rows cast to bf16, times the bf16 ``weight_scale``
[1] tensor: ``Qwen4ExpNGramEmbedding._embed_ngram_ids``); test/ssd/test_ple_rows.py
runs upstream's own classes.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from engram.errors import EngramTableError
from engram.fp8 import dequantize_rows, pack_rows
from engram.row_formats import (
    ROW_FORMATS,
    Bf16Rows,
    E4m3TensorScaleRows,
    E4m3Ue8m0Rows,
    bf16_bits,
    bf16_value,
    row_format,
)
from test.ssd.helpers import random_table


def _bits(value: float) -> int:
    return bf16_bits(torch.tensor([value]))


def _upstream_expression(stored: torch.Tensor, scale_bits: int) -> torch.Tensor:
    weight_scale = torch.tensor([scale_bits], dtype=torch.int32).to(torch.int16)
    return stored.to(torch.bfloat16) * weight_scale.view(torch.bfloat16)


def _assert_same(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    nan = theirs.isnan()
    assert torch.equal(ours.isnan(), nan)
    assert torch.equal(ours.view(torch.int16)[~nan], theirs.view(torch.int16)[~nan])
    assert bool((ours.view(torch.int16)[nan] == 0x7FC0).all())


def test_row_bytes_and_registry() -> None:
    assert [(cls.name, cls.row_bytes_of(256)) for cls in ROW_FORMATS.values()] == [
        ("e4m3-ue8m0", 264),
        ("e4m3-tensor-scale", 256),
        ("bf16", 512),
    ]
    assert E4m3TensorScaleRows(160).row_bytes == 160 and Bf16Rows(160).row_bytes == 320
    fmt = row_format("e4m3-tensor-scale", 160, {"scale_bf16_bits": 0x3EBD})
    assert fmt == E4m3TensorScaleRows(160, 0x3EBD) and fmt.params() == {"scale_bf16_bits": 0x3EBD}
    with pytest.raises(EngramTableError, match="unknown row format 'int4'"):
        row_format("int4", 160)
    with pytest.raises(EngramTableError, match="bad parameters"):
        row_format("bf16", 160, {"scale": 2})


@pytest.mark.parametrize("cls", [E4m3TensorScaleRows, Bf16Rows])
def test_table_scaled_rows_dequantise_as_upstream(cls: type) -> None:
    """Every e4m3 byte (or random bf16 values, NaN and both zeros among them) times scales
    from tiny (subnormal products) to huge (overflow to infinity)."""
    if cls is E4m3TensorScaleRows:
        stored = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).repeat(7, 1)
    else:
        stored = torch.randint(-32768, 32767, (7, 333), dtype=torch.int16).view(torch.bfloat16)
        stored.view(-1)[:4] = torch.tensor([float("nan"), 0.0, -0.0, float("inf")])
    scales = [random.randint(1, 0x7F7F) for _ in range(30)] + [0x0001, 0x3F80, 0x7F7F, 0x8001]
    for bits in scales:
        fmt = cls(stored.shape[1], bits)
        packed = torch.from_numpy(fmt.pack(stored))
        assert packed.shape == (7, fmt.row_bytes) and packed.dtype == torch.uint8
        _assert_same(fmt.dequantize(packed), _upstream_expression(stored, bits))
        _assert_same(
            fmt.dequantize(packed[2:5].unsqueeze(0))[0], _upstream_expression(stored[2:5], bits)
        )


def test_packing_follows_upstreams_storage_cast() -> None:
    """fp8 storage of a bf16 checkpoint holds torch's (lossy) downcast, as upstream's
    loader's ``.to(float8_e4m3fn)``; e4m3 bytes pass as they are."""
    values = (torch.randn(50, 32) * 300).to(torch.bfloat16)  # some past e4m3's 448
    fp8 = E4m3TensorScaleRows(32)
    assert np.array_equal(
        fp8.pack(values), values.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    )
    raw = torch.randint(0, 256, (50, 32), dtype=torch.uint8)
    assert np.array_equal(fp8.pack(raw), raw.numpy())
    assert np.array_equal(fp8.pack(raw.view(torch.float8_e4m3fn)), raw.numpy())
    assert np.array_equal(Bf16Rows(32).pack(values), values.view(torch.uint8).numpy())
    with pytest.raises(EngramTableError, match="cannot be packed from torch.uint8"):
        Bf16Rows(32).pack(raw)
    with pytest.raises(EngramTableError, match=r"must be \[k, 32\]"):
        fp8.pack(values[:, :16])
    with pytest.raises(EngramTableError, match="no per-row scales"):
        fp8.pack(raw, raw)
    weight, scale = random_table(20, 64)
    ue8m0 = E4m3Ue8m0Rows(64)
    packed = ue8m0.pack(weight, scale)
    assert np.array_equal(packed, pack_rows(weight, scale).numpy())
    assert torch.equal(
        ue8m0.dequantize(torch.from_numpy(packed)).view(torch.int16),
        dequantize_rows(weight, scale).view(torch.int16),
    )
    with pytest.raises(EngramTableError, match="need their exponent bytes"):
        ue8m0.pack(weight)


def test_table_scales() -> None:
    assert (
        bf16_value(0x3F80) == 1.0
        and bf16_value(0xBF80) == -1.0
        and bf16_value(_bits(0.37)) == float(torch.tensor(0.37).to(torch.bfloat16))
    )
    assert _bits(2.5) == 0x4020
    for bits in (0x7F80, 0xFF80, 0x7FC0):
        with pytest.raises(EngramTableError, match="every row would dequantise to NaN or infinity"):
            E4m3TensorScaleRows(16, bits)
    with pytest.raises(EngramTableError, match="16 bits"):
        Bf16Rows(16, 0x10000)
    with pytest.raises(EngramTableError, match="one value"):
        bf16_bits(torch.ones(2))
