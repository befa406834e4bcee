"""``python -m engram.convert`` of a Qwen3.8-Flash-Next checkpoint's PLE tables (a synthetic
one: upstream's names, 512 shards over two files, upstream's buffers): converted, found
and named; converted again with not a byte written; damage found and converted again;
a crash mid-table resumed. (Replacing the tables of a changed checkpoint, killed at any
moment, is test_replace.py's, for both families.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engram.errors import EngramTableError
from engram.row_formats import E4m3TensorScaleRows
from engram.ssd.converter import convert_checkpoint
from engram.ssd.faults import EngramChecksumError
from engram.ssd.integrity import DAMAGED
from engram.ssd.manifest import TableManifest
from engram.tables import create_table
from test.ssd.helpers import REPO, crash_convert, run_convert
from test.ssd.ple_checkpoint import PleCheckpoint, write_ple_checkpoint

pytestmark = pytest.mark.slow  # builds upstream's qwen4_exp embedding for the buffers

BIG = 100_000  # ngram_vocab_size_base: ~400k rows (6.4 MB of fp8) per table


def _expected(ckpt: PleCheckpoint, layer: int, ids: torch.Tensor) -> torch.Tensor:
    table = ckpt.tables[layer]
    fmt = E4m3TensorScaleRows(ckpt.head_dim, ckpt.scale_bits[layer])
    return fmt.dequantize(torch.from_numpy(fmt.pack(table[ids.reshape(-1)]))).view(*ids.shape, -1)


def _lookup(out: Path, layer: int, ids: torch.Tensor, verify: str = "quick") -> torch.Tensor:
    with create_table("ssd", None, None, path=out, layer=layer, verify=verify) as table:
        return table.lookup(ids)


def _stamps(out: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(out.rglob("*"))
    }


def _flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x5A]))


def test_converts_names_the_family_and_rewrites_nothing_again(tmp_path: Path) -> None:
    ckpt = write_ple_checkpoint(tmp_path / "ckpt", "fp8", base=BIG)
    out = tmp_path / "ssd"
    args = ["--checkpoint", str(ckpt.directory), "--out", str(out), "--quiet"]
    first = run_convert(*args)
    assert first.returncode == 0, first.stderr
    head = first.stdout.splitlines()[0]
    assert "Qwen3.8-Flash-Next PLE (qwen4_exp) tables (qwen4-exp-ple): layers [1, 3]" in head
    assert "e4m3-tensor-scale, 16 values = 16 B a row" in head
    assert sorted(os.listdir(out)) == ["layer1", "layer3", "manifest.json"]
    for layer, table in ckpt.tables.items():
        manifest = TableManifest.load(out / f"layer{layer}")
        assert (manifest.num_rows, manifest.row_bytes, manifest.rows_per_block) == (
            table.shape[0], 16, 256
        )  # fmt: skip
        assert manifest.row_format_name == "e4m3-tensor-scale"
        assert manifest.row_format_params == {"scale_bf16_bits": ckpt.scale_bits[layer]}
        ids = torch.randint(0, table.shape[0], (33, 4))
        got, want = _lookup(out, layer, ids), _expected(ckpt, layer, ids)
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num().view(torch.int16), want.nan_to_num().view(torch.int16))
    before = _stamps(out)
    # NOTE: the child's write() calls, counted by the kernel (/proc/self/io wchar), show
    # that converting again writes nothing at all, not only that no file changed.
    again = subprocess.run(
        [sys.executable, "-c", _COUNT_WRITES, str(ckpt.directory), str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["written"] == 0 and "already converted" in report["log"][-1]
    assert _stamps(out) == before


_COUNT_WRITES = """
import json, sys
from pathlib import Path
from engram.ssd.converter import convert_checkpoint

def wchar():
    return int(dict(l.split(": ") for l in open("/proc/self/io").read().splitlines())["wchar"])

log = []
start = wchar()
convert_checkpoint(Path(sys.argv[1]), Path(sys.argv[2]), log=log.append, show_progress=False)
written = wchar() - start
print(json.dumps({"written": written, "log": log}))
"""


def test_damage_is_found_and_that_table_converted_again(tmp_path: Path) -> None:
    ckpt = write_ple_checkpoint(tmp_path / "ckpt", "bf16", base=3000, parts=8)
    out = tmp_path / "ssd"
    options = {"chunk_bytes": 16 << 10, "log": lambda _: None, "show_progress": False}
    convert_checkpoint(ckpt.directory, out, **options)
    data = out / "layer3" / "rows.bin"
    middle = data.stat().st_size // 2 + 100  # a middle chunk: not checked on open
    _flip_byte(data, middle)
    layer1 = _stamps(out / "layer1")
    rows_per_block = 4096 // 32  # bf16 rows of 16 values
    damaged_row = middle // 4096 * rows_per_block
    with pytest.raises(EngramChecksumError, match="checksum mismatch"):
        _lookup(out, 3, torch.tensor([damaged_row]))
    assert (out / "layer3" / DAMAGED).exists()
    logged: list[str] = []
    convert_checkpoint(ckpt.directory, out, **{**options, "log": logged.append})
    again = f"converting the SSD table {out / 'layer3'} again from the checkpoint: it is unusable"
    assert any(line.startswith(again) for line in logged), logged
    assert not any(line.startswith("layer1:") for line in logged)
    assert _stamps(out / "layer1") == layer1
    ids = torch.arange(ckpt.tables[3].shape[0])
    want = ckpt.tables[3][ids]
    got = _lookup(out, 3, ids, verify="full")
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num().view(torch.int16), want.nan_to_num().view(torch.int16))
    # damage in the first chunk is found by the check on open, before any lookup
    _flip_byte(out / "layer1" / "rows.bin", 5)
    with pytest.raises(EngramTableError, match="checksum mismatch"):
        _lookup(out, 1, torch.tensor([0]))
    logged.clear()
    convert_checkpoint(ckpt.directory, out, **{**options, "log": logged.append})
    again = f"converting the SSD table {out / 'layer1'} again from the checkpoint: it is unusable"
    assert any(line.startswith(again) for line in logged), logged


def test_a_crash_mid_table_resumes(tmp_path: Path) -> None:
    ckpt = write_ple_checkpoint(tmp_path / "ckpt", "fp8", base=BIG)
    out = tmp_path / "ssd"
    args = ["--checkpoint", str(ckpt.directory), "--out", str(out), "--chunk-mib", "0.25"]
    crashed = crash_convert(*args, "--quiet")  # killed mid-way through the first table
    assert crashed.returncode == -signal.SIGXFSZ, crashed.stderr
    progress = json.loads((out / "layer1.partial" / "progress.json").read_text())
    assert 0 < len(progress["chunk_crc32"]) < 25
    resumed = run_convert(*args, "--quiet", "--verify")
    assert resumed.returncode == 0, resumed.stderr
    written = len(progress["chunk_crc32"]) * (256 << 10)
    assert f"layer1: half written ({written:,} bytes), resuming" in resumed.stdout
    assert "layer 3: all" in resumed.stdout and "layer 1: all" in resumed.stdout
    ids = torch.randint(0, ckpt.tables[1].shape[0], (500,))
    got, want = _lookup(out, 1, ids), _expected(ckpt, 1, ids)
    assert torch.equal(got.nan_to_num().view(torch.int16), want.nan_to_num().view(torch.int16))


def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    ckpt = write_ple_checkpoint(tmp_path / "ckpt", "bf16", base=20, parts=8)
    shards = sorted(ckpt.directory.glob("*.safetensors"))
    tensors = load_file(str(shards[0]))
    name = next(n for n in tensors if n.endswith("shard_2.weight"))
    plain = name.replace(".shard_2.weight", ".weight")
    save_file({**tensors, plain: tensors[name].clone()}, str(shards[0]))
    with pytest.raises(EngramTableError, match=f"unsupported PLE weight layout {plain}"):
        convert_checkpoint(ckpt.directory, tmp_path / "ssd", log=lambda _: None)
    save_file({n: t for n, t in tensors.items() if n != name}, str(shards[0]))
    with pytest.raises(EngramTableError, match=r"shard_2 has 0 rows, but 8 shards of a 128-row"):
        convert_checkpoint(ckpt.directory, tmp_path / "ssd", log=lambda _: None)
    save_file(tensors, str(shards[0]))
    config = json.loads((ckpt.directory / "config.json").read_text())
    config["text_config"]["split_ngram_parts"] = 4
    (ckpt.directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngramTableError, match="has shard_7 but split_ngram_parts is 4"):
        convert_checkpoint(ckpt.directory, tmp_path / "ssd", log=lambda _: None)
    config["text_config"].update(split_ngram_parts=8, ngram_vocab_size_base=30)
    (ckpt.directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngramTableError, match="make 128 rows, config.json's n-gram fields make"):
        convert_checkpoint(ckpt.directory, tmp_path / "ssd", log=lambda _: None)
    assert not (tmp_path / "ssd").exists()
