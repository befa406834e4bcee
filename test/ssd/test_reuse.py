"""The one "reuse or convert" decision: a table converted from these rows is reused
(across processes too); other rows, a damaged or truncated table, or a half-written one
are converted (again); a directory that is not ours is never touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engram.errors import EngramTableError
from engram.ssd.checkpoint import find_tables
from engram.ssd.ensure import decide, ensure_table
from engram.ssd.layout import DiskLayout
from engram.ssd.manifest import FORMAT_VERSION
from engram.tables import create_table
from test.ssd.helpers import REPO, random_table, run_convert, tiny_spec_config, write_checkpoint


def _stamp(path: Path) -> tuple[int, int]:
    st = (path / "rows.bin").stat()
    return st.st_ino, st.st_mtime_ns


def _serves(path: Path, weight: torch.Tensor, scale: torch.Tensor) -> bool:
    ids = torch.randint(0, weight.shape[0], (500,))
    with create_table("ssd", None, None, path=path, verify="full") as table:
        return torch.equal(table.lookup(ids), create_table("dram", weight, scale).lookup(ids))


@pytest.fixture
def converted(tmp_path: Path) -> tuple[Path, Path, dict[int, tuple[torch.Tensor, torch.Tensor]]]:
    tables = write_checkpoint(tmp_path / "ckpt", tiny_spec_config())
    out = tmp_path / "ssd"
    ensure_table(out / "layer1", find_tables(tmp_path / "ckpt")[1], chunk_bytes=16 << 10)
    return tmp_path / "ckpt", out / "layer1", tables


def test_reused_after_a_restart(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "ckpt", tiny_spec_config())
    args = ("--checkpoint", str(tmp_path / "ckpt"), "--out", str(tmp_path / "ssd"), "--quiet")
    first = run_convert(*args)
    assert first.returncode == 0, first.stderr
    stamp = _stamp(tmp_path / "ssd" / "layer3")
    second = run_convert(*args)  # a new process
    assert second.returncode == 0, second.stderr
    assert "is already converted from this checkpoint" in second.stdout
    assert _stamp(tmp_path / "ssd" / "layer3") == stamp


def test_changed_checkpoint_bytes_are_converted_again(converted) -> None:
    ckpt, path, tables = converted
    source = find_tables(ckpt)[1]
    assert decide(path, source).reuse
    # Change row 0's bytes in the checkpoint (a sampled row: the first).
    tensors = load_file(str(ckpt / "model.safetensors"))
    name = "model.layers.1.engram.embed.weight"
    weight = tensors[name].view(torch.uint8).clone()
    fresh = random_table(1, weight.shape[1])[0][0]
    assert not torch.equal(fresh, weight[0])
    weight[0] = fresh
    tensors[name] = weight.view(torch.float8_e4m3fn)
    save_file(tensors, str(ckpt / "model.safetensors"))
    changed = find_tables(ckpt)[1]
    decision = decide(path, changed)
    assert not decision.reuse and decision.why.startswith("it was converted from other rows")
    assert decision.write_bytes == DiskLayout(changed.num_rows, 64).file_bytes
    assert decision.stale_bytes >= decision.write_bytes
    ensure_table(path, changed)
    assert _serves(path, weight, tables[1][1])
    assert decide(path, changed).reuse


@pytest.mark.parametrize("damage", ["flip-a-byte", "truncate", "no-data-file", "old-format"])
def test_a_damaged_table_is_converted_again(converted, damage: str, caplog) -> None:
    ckpt, path, tables = converted
    data = path / "rows.bin"
    if damage == "flip-a-byte":
        with open(data, "r+b") as f:  # in the first chunk, which the quick check reads
            byte = os.pread(f.fileno(), 1, 1000)
            os.pwrite(f.fileno(), bytes([byte[0] ^ 0x40]), 1000)
    elif damage == "truncate":
        os.truncate(data, data.stat().st_size - 4096)
    elif damage == "no-data-file":
        data.unlink()
    else:
        # A table written by the previous format (version 1: no block hashes).
        manifest = path / "manifest.json"
        manifest.write_text(
            manifest.read_text().replace(f'"version": {FORMAT_VERSION}', '"version": 1')
        )
    source = find_tables(ckpt)[1]
    decision = decide(path, source)
    assert not decision.reuse and decision.why.startswith("it is unusable: ")
    with caplog.at_level("INFO", logger="engram.ssd.ensure"):
        ensure_table(path, source)
    # one line: which table, that it is converted again, what was wrong
    [said] = [r for r in caplog.records if "again" in r.getMessage()]
    assert said.levelname == "WARNING"
    assert said.getMessage() == (
        f"converting the SSD table {path} again from the checkpoint: {decision.why}"
    )
    assert [r.levelname for r in caplog.records if r.name == "engram.ssd.ensure"] == ["WARNING"]
    assert decide(path, source).reuse
    assert _serves(path, *tables[1])


def test_a_first_conversion_says_what_it_converts_where_and_how_much(tmp_path, caplog) -> None:
    """Opening an ssd table over a directory with no table yet (what a first server start
    with ``--engram-offload ssd`` does) says, in one info line before it writes: the
    layer, the checkpoint, the directory and the size; a later open says nothing."""
    from engram.ssd.sources import RowRange, source_layout

    ckpt = tmp_path / "ckpt"
    tables = write_checkpoint(ckpt, tiny_spec_config())
    layer = int(torch.randint(0, 2, ()).item()) * 2 + 1  # 1 or 3
    source = find_tables(ckpt)[layer]
    path = tmp_path / "ssd" / f"layer{layer}"
    size = source_layout(source, 16 << 10).file_bytes
    with caplog.at_level("INFO", logger="engram.ssd.ensure"):
        create_table("ssd", None, None, path=path, source=source, chunk_bytes=16 << 10).close()
    said = [r for r in caplog.records if r.name == "engram.ssd.ensure"]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        (
            "INFO",
            f"converting layer {layer}'s table from {ckpt} into {path} "
            f"({size / (1 << 20):.1f} MiB to write): the first start with this SSD "
            "directory; later starts reuse it",
        )
    ]
    assert _serves(path, *tables[layer])
    caplog.clear()
    with caplog.at_level("INFO", logger="engram.ssd.ensure"):
        create_table("ssd", None, None, path=path, source=source, chunk_bytes=16 << 10).close()
    assert not [r for r in caplog.records if r.name == "engram.ssd.ensure"]
    # a TP rank's share names its rows
    rows = RowRange(source, 0, source.num_rows // 2)
    with caplog.at_level("INFO", logger="engram.ssd.ensure"):
        ensure_table(tmp_path / "ssd" / "shard", rows, chunk_bytes=16 << 10)
    [line] = [r.getMessage() for r in caplog.records if r.name == "engram.ssd.ensure"]
    assert line.startswith(
        f"converting layer {layer}'s table from {ckpt} (rows 0 to {source.num_rows // 2:,}) "
        f"into {tmp_path / 'ssd' / 'shard'} ("
    ), line


def test_convert_says_which_damaged_table_it_converts_again(converted) -> None:
    """``python -m engram.convert`` over a table that a server marked damaged: one line
    names it, says what was found and that it is converted again; the other is reused."""
    from engram.ssd.faults import EngramChecksumError
    from engram.ssd.integrity import mark_damaged

    ckpt, path, tables = converted
    args = ("--checkpoint", str(ckpt), "--out", str(path.parent), "--quiet")
    first = run_convert(*args)  # converts layer 3 beside the fixture's layer 1
    assert first.returncode == 0, first.stderr
    chunk = int(torch.randint(0, 3, ()))
    mark_damaged(path, EngramChecksumError(f"checksum mismatch in chunk {chunk}", path, chunk))
    run = run_convert(*args)
    assert run.returncode == 0, run.stderr
    said = run.stdout.splitlines()[1:]  # after the line naming what the checkpoint holds
    lines = [line for line in said if "layer" in line and "published" not in line]
    assert lines == [
        f"converting the SSD table {path} again from the checkpoint: it is unusable: SSD table "
        f"{path} was found damaged while serving: checksum mismatch in chunk {chunk}"
    ], run.stdout
    assert "again" not in run.stderr  # said once
    assert decide(path, find_tables(ckpt)[1]).reuse and _serves(path, *tables[1])


def test_a_half_written_table_is_resumed(converted, caplog) -> None:
    ckpt, path, tables = converted
    source = find_tables(ckpt)[1]
    layout = DiskLayout.with_chunk_bytes(source.num_rows, 64, 16 << 10)
    # A crash after two chunks and a piece of the third, as the writer leaves it.
    work = path.with_name("layer1.partial")
    path.rename(work)
    (work / "manifest.json").unlink()
    os.truncate(work / "rows.bin", 2 * layout.chunk_bytes + 100)
    with open(work / "rows.bin", "rb") as f:
        crcs = [zlib.crc32(f.read(layout.chunk_bytes)) for _ in range(2)]
    progress = {"source": source.identity(), "layout": [layout.num_rows, 64, layout.chunk_blocks]}
    (work / "progress.json").write_text(json.dumps({**progress, "chunk_crc32": crcs}))
    decision = decide(path, source, 16 << 10)
    assert decision.why == f"half written ({2 * layout.chunk_bytes:,} bytes), resuming"
    assert decision.write_bytes == layout.file_bytes - 2 * layout.chunk_bytes
    with caplog.at_level("INFO", logger="engram.ssd.ensure"):
        ensure_table(path, source, chunk_bytes=16 << 10)
    [said] = [r.getMessage() for r in caplog.records if r.name == "engram.ssd.ensure"]
    left = (layout.file_bytes - 2 * layout.chunk_bytes) / (1 << 20)
    assert said == (
        f"resuming the conversion of layer 1's table from {ckpt} into {path} "
        f"({left:.1f} MiB left to write); later starts reuse it"
    )
    assert not work.exists() and _serves(path, *tables[1])


def test_a_directory_that_is_not_ours_is_never_touched(converted) -> None:
    ckpt, path, _ = converted
    source = find_tables(ckpt)[1]
    mine = path.with_name("mine")
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(EngramTableError, match="is not an SSD table .* refusing to overwrite"):
        decide(mine, source)
    (mine / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(EngramTableError, match="not an Engram SSD table manifest; refusing"):
        ensure_table(mine, source)
    assert sorted(os.listdir(mine)) == ["manifest.json", "notes.txt"]


def test_the_identity_reads_sampled_rows_only(tmp_path: Path) -> None:
    """A 3 GiB table (a sparse file): its identity and a slice of it are read without
    the process growing by anything near the table's size."""
    rows, dim = (3 << 30) // 264, 256
    header = {
        "layers.1.engram.embed.weight": {
            "dtype": "F8_E4M3", "shape": [rows, dim], "data_offsets": [0, rows * dim]
        },
        "layers.1.engram.embed.scale": {
            "dtype": "F8_E8M0", "shape": [rows, dim // 32], "data_offsets": [rows * dim, rows * 264]
        },
    }  # fmt: skip
    raw = json.dumps(header).encode()
    (tmp_path / "ckpt").mkdir()
    with open(tmp_path / "ckpt" / "model.safetensors", "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + rows * 264)
    script = (
        "import resource, sys; from pathlib import Path\n"
        "from engram.ssd.checkpoint import find_tables\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "table = find_tables(Path(sys.argv[1]))[1]\n"
        "table.identity(); rows = table.read(1000, 9000)\n"
        "assert rows.shape == (8000, 264)\n"
        "assert int(rows.sum()) == 0  # the bytes are touched\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "ckpt")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) < 256  # MiB, against a 3,072 MiB table
