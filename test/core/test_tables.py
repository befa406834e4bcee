"""Every placement returns the same rows; bad tables and ids get named errors."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from engram import EngramInputError, EngramTableError
from engram.fp8 import dequantize_rows, quantize_rows
from engram.ssd.readers import DEFAULT_READER
from engram.tables import PLACEMENTS, TableOptions, create_table

ROWS_PLACEMENTS = [name for name in PLACEMENTS if name != "off"]


def random_table(rows: int = 997, dim: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_rows(torch.randn(rows, dim) * torch.rand(rows, 1) * 8)


def make(placement: str, weight, scale, tmp_path: Path):
    where = {"path": tmp_path / placement} if placement == "ssd" else {}
    return create_table(placement, weight, scale, device="cpu", **where)


def test_placements_registry_feeds_choices() -> None:
    assert list(PLACEMENTS)[:2] == ["hbm", "dram"] and "off" in PLACEMENTS


@pytest.mark.parametrize("placement", ROWS_PLACEMENTS)
def test_placement_rows_are_bit_identical_to_reference(placement: str, tmp_path: Path) -> None:
    weight, scale = random_table()
    ids = torch.randint(0, weight.shape[0], (7, 48))
    ids[3] = ids[1]  # repeated rows
    with make(placement, weight, scale, tmp_path) as table:
        got = table.lookup(ids)
        assert got.dtype == torch.bfloat16 and got.shape == (7, 48, 64)
        expected = dequantize_rows(weight[ids], scale[ids])
        assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
        snap = table.counters.stats()
        assert snap["lookups"] == 1 and snap["rows_requested"] == ids.numel()
        assert snap["unique_rows"] == torch.unique(ids).numel()
        assert sum(table.memory().values()) >= weight.numel() + scale.numel()


def test_all_placements_agree_with_each_other(tmp_path: Path) -> None:
    weight, scale = random_table(rows=5003, dim=256)
    ids = torch.randint(0, 5003, (512, 48), dtype=torch.int32)
    outs = []
    for placement in ROWS_PLACEMENTS:
        with make(placement, weight, scale, tmp_path) as table:
            outs.append(table.lookup(ids).view(torch.int16))
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_nan_rows_have_the_same_bits_in_every_placement(tmp_path: Path) -> None:
    weight, scale = random_table(rows=300, dim=64)
    nan_rows = torch.randperm(300)[:5]
    weight[nan_rows, torch.randint(0, 64, (5,))] = torch.tensor(
        [0x7F, 0xFF, 0x7F, 0xFF, 0x7F], dtype=torch.uint8
    )
    ids = torch.cat([nan_rows, torch.randint(0, 300, (40,))])
    for placement in ROWS_PLACEMENTS:
        with make(placement, weight, scale, tmp_path) as table:
            bits = table.lookup(ids).view(torch.int16)
        nan = bits.view(torch.bfloat16).isnan()
        assert int(nan[:5].sum()) >= 5, placement
        assert bool((bits[nan] == 0x7FC0).all()), placement


def test_off_holds_nothing_and_refuses_lookups() -> None:
    table = create_table("off", None, None, num_rows=10, head_dim=64)
    assert table.memory() == {}
    with pytest.raises(EngramTableError, match="holds no rows"):
        table.lookup(torch.tensor([1]))


def test_unknown_placement_lists_choices() -> None:
    weight, scale = random_table(rows=4)
    with pytest.raises(EngramTableError, match="unknown Engram placement 'nvme'.*hbm, dram"):
        create_table("nvme", weight, scale)


@pytest.mark.parametrize("placement", ROWS_PLACEMENTS)
def test_out_of_range_ids_are_named(placement: str, tmp_path: Path) -> None:
    weight, scale = random_table(rows=50)
    with make(placement, weight, scale, tmp_path) as table:
        with pytest.raises(
            EngramInputError, match="row id 50 is out of range for a table of 50 rows"
        ):
            table.lookup(torch.tensor([3, 50]))
        with pytest.raises(EngramInputError, match="row id -1"):
            table.lookup(torch.tensor([-1]))
        with pytest.raises(EngramInputError, match="int32 or int64"):
            table.lookup(torch.tensor([1.0]))


def test_bad_table_arrays_are_named() -> None:
    weight, scale = random_table(rows=8, dim=64)
    with pytest.raises(EngramTableError, match="rows are 64 wide but the spec's head_dim is 256"):
        create_table("hbm", weight, scale, head_dim=256)
    with pytest.raises(EngramTableError, match="uint8 or float8_e4m3fn, got torch.float32"):
        create_table("hbm", weight.float(), scale)
    with pytest.raises(EngramTableError, match=r"scale is \[8, 3\], expected \[8, 2\]"):
        create_table("dram", weight, torch.ones(8, 3, dtype=torch.uint8))
    with pytest.raises(EngramTableError, match="needs the table's weight and scale"):
        create_table("hbm", None, None)


def test_unknown_table_options_are_named() -> None:
    weight, scale = random_table(rows=8)
    with pytest.raises(
        EngramTableError,
        match=r"unknown option\(s\) for the 'dram' placement: \['ram_cache_bytes'\]",
    ):
        create_table("dram", weight, scale, ram_cache_bytes=1 << 20)


def test_dram_adopts_packed_rows_and_copies_anything_else() -> None:
    from engram.tables.dram import packed_host_rows

    weight, scale = random_table()
    w, s = packed_host_rows(weight.shape[0], weight.shape[1], "cpu")
    w.copy_(weight.view(torch.uint8))
    s.copy_(scale.view(torch.uint8))
    adopted = create_table("dram", w, s)
    copied = create_table("dram", weight, scale)
    assert (adopted.weight.data_ptr(), adopted.scale.data_ptr()) == (w.data_ptr(), s.data_ptr())
    assert copied.weight.data_ptr() != weight.data_ptr()
    ids = torch.randint(0, weight.shape[0], (300,))
    want = dequantize_rows(weight[ids], scale[ids])
    for table in (adopted, copied):
        assert torch.equal(table.lookup(ids).view(torch.int16), want.view(torch.int16))


def test_off_is_built_by_the_class_registered_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from engram.tables.off import OffTable

    class RegisteredOff(OffTable):
        """Another class registered as ``off``: create_table must build this one."""

    monkeypatch.setitem(PLACEMENTS, "off", RegisteredOff)
    rows, dim = random.randint(1, 999), 32 * random.randint(1, 8)
    table = create_table("off", None, None, num_rows=rows, head_dim=dim)
    assert type(table) is RegisteredOff and (table.num_rows, table.head_dim) == (rows, dim)
    # every table answers the whole interface: nothing to read ahead, no extra counts
    assert table.read_ahead(torch.randint(0, rows, (5,))) is None and table.stats() == {}


def test_options_a_placement_does_not_take_are_one_error(tmp_path: Path) -> None:
    weight, scale = random_table(rows=8)
    with pytest.raises(
        EngramTableError,
        match=r"unknown option\(s\) for the 'hbm' placement: \['colour', 'path', 'read'\]",
    ):
        create_table("hbm", weight, scale, path=tmp_path, read="pread", colour=1)
    with pytest.raises(EngramTableError, match=r"for the 'off' placement: \['ram_cache_bytes'\]"):
        TableOptions("off", ram_cache_bytes=random.randint(1, 1 << 30))
    # a field left at its default is no option given; the hot cache only fronts dram and ssd
    assert TableOptions("dram", read=DEFAULT_READER).hot_cache_capacity == 0
    hot = random.randint(1, 1 << 30)
    capacity = {
        name: TableOptions(name, hot_cache_bytes=hot).hot_cache_capacity for name in PLACEMENTS
    }
    assert capacity == {"hbm": 0, "dram": hot, "ssd": hot, "off": 0}


def test_rows_not_of_the_spec_are_named() -> None:
    rows = random.randint(2, 50)
    weight, scale = random_table(rows=rows)
    for placement in ("hbm", "dram"):
        with pytest.raises(
            EngramTableError, match=f"the table has {rows} rows but the spec expects {rows + 1}"
        ):
            create_table(placement, weight, scale, num_rows=rows + 1)
