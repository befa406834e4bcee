"""The SSD file layout: no row straddles a 4 KiB page, and packing round-trips."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engram_testing.plain import row_offsets

from engram.ssd.layout import PAGE_BYTES, DiskLayout
from test.ssd.helpers import random_table


@pytest.mark.parametrize("head_dim", [32, 64, 256, 1024, 4096])
def test_rows_never_straddle_a_page_and_round_trip(head_dim: int) -> None:
    rows = int(torch.randint(50, 400, ()).item())
    layout = DiskLayout(rows, head_dim, chunk_blocks=3)
    offsets = row_offsets(layout, np.arange(rows))
    if layout.row_bytes <= PAGE_BYTES:
        assert np.all(offsets % PAGE_BYTES + layout.row_bytes <= PAGE_BYTES)
    else:
        assert np.all(offsets % PAGE_BYTES == 0)
    assert layout.file_bytes % PAGE_BYTES == 0
    assert np.all(np.diff(offsets) > 0) and offsets[-1] + layout.row_bytes <= layout.file_bytes

    weight, scale = random_table(rows, head_dim)
    packed = layout.pack(np.concatenate([weight.numpy(), scale.numpy()], axis=1))
    assert packed.size == layout.file_bytes
    back = np.stack([packed[o : o + layout.row_bytes] for o in offsets])
    assert np.array_equal(back[:, :head_dim], weight.numpy())
    assert np.array_equal(back[:, head_dim:], scale.numpy())
    chunks = [layout.chunk_span(i) for i in range(layout.num_chunks)]
    assert sum(n for _, n, _ in chunks) == rows
    assert sum(b for _, _, b in chunks) == layout.file_bytes


def test_dsv41_rows_pack_fifteen_to_a_page() -> None:
    layout = DiskLayout(384_006_168, 256)
    assert (layout.row_bytes, layout.rows_per_block, layout.block_bytes) == (264, 15, 4096)
    assert layout.file_bytes == -(-384_006_168 // 15) * 4096
