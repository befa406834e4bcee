"""SSD tables of every row format: written, reopened from their manifest alone, served
(RAM cache and HBM hot cache in front) as the format dequantises; tables written before
row formats existed are reused as they are; an edited manifest is refused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from engram.errors import EngramTableError
from engram.row_formats import Bf16Rows, E4m3TensorScaleRows, E4m3Ue8m0Rows, RowFormat
from engram.ssd.ensure import decide, ensure_table
from engram.ssd.layout import DiskLayout
from engram.ssd.manifest import MANIFEST, TableManifest, digest_of
from engram.ssd.sources import TensorRows
from engram.tables import TableOptions, open_table
from test.ssd.helpers import random_table


def _rows(fmt: RowFormat, count: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(fmt, E4m3Ue8m0Rows):
        return random_table(count, fmt.head_dim)
    if isinstance(fmt, E4m3TensorScaleRows):
        return torch.randint(0, 256, (count, fmt.head_dim), dtype=torch.uint8), None
    return (torch.randn(count, fmt.head_dim) * 7).to(torch.bfloat16), None


@pytest.mark.parametrize(
    "fmt,per_page",
    [(E4m3Ue8m0Rows(256), 15), (E4m3TensorScaleRows(160, 0x3EBD), 25), (Bf16Rows(160, 0x4020), 12)],
    ids=lambda v: getattr(v, "name", v),
)
def test_every_format_is_served_from_ssd(tmp_path: Path, fmt: RowFormat, per_page: int) -> None:
    count = random.randint(900, 3000)
    weight, scale = _rows(fmt, count)
    source = TensorRows(weight, scale, row_format=fmt)
    assert source.read(3, 9).shape == (6, fmt.row_bytes)
    options = TableOptions(
        "ssd", head_dim=fmt.head_dim, num_rows=count, path=tmp_path / "t", source=source,
        chunk_bytes=16 << 10, ram_cache_bytes=40 * fmt.row_bytes, hot_cache_bytes=20_000,
    )  # fmt: skip
    ids = torch.randint(0, count, (random.randint(1, 60), 4))
    ids[0, 0] = ids[-1, -1]  # a repeated id
    want = fmt.dequantize(torch.from_numpy(fmt.pack(weight[ids.view(-1)], _scale(scale, ids))))
    with open_table(options) as table:
        assert table.row_format == fmt and table.row_bytes == fmt.row_bytes
        for _ in range(2):  # from the disk, then from the caches
            assert torch.equal(_bits(table.lookup(ids)), _bits(want))
        assert sum(table.counters.stats()["bytes_read"].values()) % fmt.row_bytes == 0
    manifest = TableManifest.load(tmp_path / "t")
    assert (manifest.row_format, manifest.rows_per_block) == (fmt, per_page)
    assert manifest.layout == DiskLayout.with_chunk_bytes(count, fmt.head_dim, 16 << 10, fmt.name)
    reopened = TableOptions("ssd", head_dim=fmt.head_dim, path=tmp_path / "t")
    with open_table(reopened) as table:  # no rows given: the manifest says the format
        assert torch.equal(_bits(table.lookup(ids)), _bits(want))


def _bits(rows: torch.Tensor) -> torch.Tensor:
    return rows.reshape(-1).view(torch.int16)


def _scale(scale: torch.Tensor | None, ids: torch.Tensor) -> torch.Tensor | None:
    return None if scale is None else scale[ids.view(-1)]


def test_tables_written_before_row_formats_are_reused_as_they_are(tmp_path: Path) -> None:
    # NOTE: the digest of this layout and these crcs, as the build before row formats
    # computed it.
    assert digest_of(DiskLayout(1000, 64, 3), [1, 2, 0xFFFFFFFF], {}) == (
        "27e4b17785f822f9d4abf0b55849955f"
    )
    weight, scale = random_table(2000, 64)
    source = TensorRows(weight, scale)
    assert set(source.identity()) == {"kind", "rows", "head_dim", "sample_crc32"}
    ensure_table(tmp_path / "t", source, chunk_bytes=16 << 10)
    path = tmp_path / "t" / MANIFEST
    data = json.loads(path.read_text())
    assert (data["row_format_name"], data["row_format_params"]) == ("e4m3-ue8m0", {})
    del data["row_format_name"], data["row_format_params"]  # what earlier builds wrote
    path.write_text(json.dumps(data))
    stamp = (tmp_path / "t" / "rows.bin").stat().st_mtime_ns
    assert decide(tmp_path / "t", source, 16 << 10).reuse
    ensure_table(tmp_path / "t", source, chunk_bytes=16 << 10)
    assert (tmp_path / "t" / "rows.bin").stat().st_mtime_ns == stamp
    assert TableManifest.load(tmp_path / "t").row_format == E4m3Ue8m0Rows(64)


def test_an_edited_manifest_is_refused(tmp_path: Path) -> None:
    fmt = E4m3TensorScaleRows(32, 0x3EBD)
    weight, _ = _rows(fmt, 500)
    ensure_table(tmp_path / "t", TensorRows(weight, row_format=fmt), chunk_bytes=16 << 10)
    path = tmp_path / "t" / MANIFEST
    good = json.loads(path.read_text())
    assert good["row_format_params"] == {"scale_bf16_bits": 0x3EBD}
    edits = {
        "table_digest does not match": {"row_format_params": {"scale_bf16_bits": 0x3F80}},
        "unknown row format 'int4'": {"row_format_name": "int4"},
        "table dtypes are bfloat16/bfloat16, e4m3-tensor-scale rows": {"weight_dtype": "bfloat16"},
        "row_bytes is 40 but the layout implies 32": {"row_bytes": 40},
    }
    for error, edit in edits.items():
        path.write_text(json.dumps({**good, **edit}))
        with pytest.raises(EngramTableError, match=error):
            TableManifest.load(tmp_path / "t")
    assert np.array_equal(TensorRows(weight, row_format=fmt).read(0, 500), weight.numpy())
