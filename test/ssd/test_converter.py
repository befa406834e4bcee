"""``python -m engram.convert``: bit-identical round trip, checksums, crash + resume,
foreign tables, disk space."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engram.errors import EngramTableError
from engram.model.builder import BuildOptions, build_tiny_model
from engram.ssd.converter import convert_checkpoint
from engram.tables import create_table
from test.ssd.helpers import REPO, random_table, run_convert, tiny_spec_config, write_checkpoint


def _lookup_all(out: Path, layer: int, head_dim: int, ids: torch.Tensor) -> torch.Tensor:
    with create_table("ssd", None, None, path=out, layer=layer, head_dim=head_dim) as table:
        return table.lookup(ids)


@pytest.mark.parametrize("prefix", ["model.", ""], ids=["tiny-naming-cli", "dsv41-naming"])
def test_round_trip_is_bit_identical(tmp_path: Path, prefix: str) -> None:
    config = tiny_spec_config()
    tables = write_checkpoint(tmp_path / "ckpt", config, prefix=prefix)
    if prefix:
        result = run_convert("--checkpoint", str(tmp_path / "ckpt"), "--out", str(tmp_path / "ssd"))
        assert result.returncode == 0, result.stderr
        assert "needs 0.00 GiB" in result.stdout and "GiB free" in result.stdout
    else:
        convert_checkpoint(tmp_path / "ckpt", tmp_path / "ssd", log=lambda _: None)
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "ssd"]  # no .partial left behind
    with pytest.raises(EngramTableError, match=r"converted checkpoint with layers \['1', '3'\]"):
        create_table("ssd", None, None, path=tmp_path / "ssd")
    with pytest.raises(EngramTableError, match="has no table for Engram layer 2"):
        create_table("ssd", None, None, path=tmp_path / "ssd", layer=2)
    for layer, (weight, scale) in tables.items():
        rows = weight.shape[0]
        ids = torch.cat([torch.randint(0, rows, (300,)), torch.tensor([0, rows - 1, 0])])
        ids = torch.cat([ids, ids[:51]]).view(2, -1)  # repeated ids too
        dram = create_table("dram", weight, scale, device="cpu")
        assert torch.equal(_lookup_all(tmp_path / "ssd", layer, 64, ids), dram.lookup(ids))


def test_checksum_failure_is_detected(tmp_path: Path) -> None:
    config = tiny_spec_config()
    write_checkpoint(tmp_path / "ckpt", config)
    convert_checkpoint(
        tmp_path / "ckpt", tmp_path / "ssd", chunk_bytes=64 << 10, log=lambda _: None
    )
    data = tmp_path / "ssd" / "layer3" / "rows.bin"
    chunk = 3
    with open(data, "r+b") as f:
        f.seek(chunk * (64 << 10) + 777)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(
        EngramTableError, match=rf"checksum mismatch in .*layer3/rows.bin chunk {chunk}"
    ):
        create_table("ssd", None, None, path=tmp_path / "ssd", layer=3, verify="full")
    logged: list[str] = []
    with pytest.raises(EngramTableError, match=rf"chunk {chunk} \(bytes"):
        convert_checkpoint(tmp_path / "ckpt", tmp_path / "ssd", verify=True, log=logged.append)
    assert any(line.startswith("layer 1: all") for line in logged)


def test_crash_in_the_middle_then_resume(tmp_path: Path) -> None:
    config = tiny_spec_config(vocab=6000)  # ~48k rows per layer, ~3 MiB of rows each
    tables = write_checkpoint(tmp_path / "ckpt", config)
    args = [
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--out",
        str(tmp_path / "ssd"),
        "--chunk-mib",
        "0.25",
        "--quiet",
    ]
    # The converter runs in a child whose writes past 1 MiB make the kernel kill it with
    # SIGXFSZ (Python ignores that signal by default; the child restores the default): a
    # real crash in the middle of the first table, at a reproducible point.
    crash = (
        "import resource, signal, sys; from engram.convert import main; "
        "signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20)); "
        "sys.exit(main(sys.argv[1:]))"
    )
    crashed = subprocess.run(
        [sys.executable, "-c", crash, *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert crashed.returncode == -signal.SIGXFSZ, crashed.stderr
    partial = tmp_path / "ssd.partial"
    progress = json.loads((partial / "layer1" / "progress.json").read_text())
    assert 0 < len(progress["chunk_crc32"]) < 12
    assert not (tmp_path / "ssd").exists()

    resumed = run_convert(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming the conversion" in resumed.stdout
    assert not partial.exists()
    for layer, (weight, scale) in tables.items():
        ids = torch.randint(0, weight.shape[0], (2000,))
        dram = create_table("dram", weight, scale, device="cpu")
        with create_table(
            "ssd", None, None, path=tmp_path / "ssd", layer=layer, verify="full"
        ) as t:
            assert torch.equal(t.lookup(ids), dram.lookup(ids))


def test_refuses_a_table_from_another_checkpoint(tmp_path: Path) -> None:
    config = tiny_spec_config()
    write_checkpoint(tmp_path / "a", config)
    write_checkpoint(tmp_path / "b", config)  # same shapes, other rows
    logged: list[str] = []
    convert_checkpoint(tmp_path / "a", tmp_path / "ssd", log=logged.append, show_progress=False)
    before = (tmp_path / "ssd" / "manifest.json").read_text()
    convert_checkpoint(tmp_path / "a", tmp_path / "ssd", log=logged.append)
    assert "already converted" in logged[-1]
    with pytest.raises(
        EngramTableError,
        match="different checkpoint .Engram tables differ for layers 1, 3.; refusing to overwrite",
    ):
        convert_checkpoint(tmp_path / "b", tmp_path / "ssd", log=logged.append)
    assert (tmp_path / "ssd" / "manifest.json").read_text() == before
    # A half-finished conversion of another checkpoint is not taken over either.
    shutil.copytree(tmp_path / "ssd", tmp_path / "other.partial")
    (tmp_path / "other.partial" / "source.json").write_text("{}")
    with pytest.raises(EngramTableError, match="half-finished conversion of another checkpoint"):
        convert_checkpoint(tmp_path / "b", tmp_path / "other", log=logged.append)


def test_out_of_space_is_refused_before_writing(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    rows, dim = (free + (8 << 30)) // 256 + 1, 256  # a table 8 GiB larger than the free space
    header = {
        "layers.1.engram.embed.weight": {
            "dtype": "F8_E4M3",
            "shape": [rows, dim],
            "data_offsets": [0, rows * dim],
        },
        "layers.1.engram.embed.scale": {
            "dtype": "F8_E8M0",
            "shape": [rows, dim // 32],
            "data_offsets": [rows * dim, rows * (dim + 8)],
        },
    }
    raw = json.dumps(header).encode()
    (tmp_path / "ckpt").mkdir()
    path = tmp_path / "ckpt" / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + rows * (dim + 8))  # sparse: takes no space
    with pytest.raises(
        EngramTableError, match=r"not enough disk space .*: needs [\d.]+ GiB, [\d.]+ GiB free"
    ):
        convert_checkpoint(tmp_path / "ckpt", tmp_path / "ssd", log=lambda _: None)
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # nothing written


def test_disk_filling_up_mid_write_fails_cleanly(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs")
    config = tiny_spec_config(vocab=6000)
    write_checkpoint(tmp_path / "ckpt", config)
    small = tmp_path / "small"
    small.mkdir()
    # A 2 MiB tmpfs in a private mount namespace: the converter really gets ENOSPC.
    script = (
        f"mount -t tmpfs -o size=2m tmpfs {small} || exit 77; "
        f"{shlex.join(convert_command(tmp_path / 'ckpt', small / 'ssd'))}; echo rc=$?; "
        f"cat {small}/ssd.partial/layer1/progress.json"
    )
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if run.returncode == 77 or "rc=" not in run.stdout:
        pytest.skip(f"cannot mount a private tmpfs here: {run.stderr.strip()}")
    assert "rc=1" in run.stdout
    assert "the disk filled while writing" in run.stderr and "No space left on device" in run.stderr
    assert "run again to resume" in run.stderr
    kept = json.loads(run.stdout.split("rc=1", 1)[1])
    assert len(kept["chunk_crc32"]) >= 1  # finished chunks are kept for the resume


def test_tables_that_disagree_with_the_spec_are_named(tmp_path: Path) -> None:
    config = tiny_spec_config()
    write_checkpoint(tmp_path / "wide", {**config, "engram_head_dim": 96}, with_config=False)
    (tmp_path / "wide" / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngramTableError, match="rows are 96 wide but engram_head_dim is 64"):
        convert_checkpoint(tmp_path / "wide", tmp_path / "o1")

    (tmp_path / "bf16").mkdir()
    weight, scale = random_table(100, 64)
    save_file(
        {
            "layers.2.engram.embed.weight": weight.to(torch.bfloat16),
            "layers.2.engram.embed.scale": scale,
        },
        str(tmp_path / "bf16" / "model.safetensors"),
    )
    with pytest.raises(EngramTableError, match=r"layers.2.engram.embed.weight is BF16 \[100, 64\]"):
        convert_checkpoint(tmp_path / "bf16", tmp_path / "o2")


def convert_command(checkpoint: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "engram.convert",
        "--checkpoint",
        str(checkpoint),
        "--out",
        str(out),
        "--chunk-mib",
        "0.25",
        "--no-space-check",
        "--quiet",
    ]


def test_converts_the_tiny_model(tmp_path: Path) -> None:
    build_tiny_model(tmp_path / "tiny", BuildOptions(seed=int(torch.randint(0, 1000, ()))))
    config = json.loads((tmp_path / "tiny" / "config.json").read_text())
    convert_checkpoint(tmp_path / "tiny", tmp_path / "ssd", log=lambda _: None)
    tensors = load_file(str(tmp_path / "tiny" / "model.safetensors"))
    for layer in config["engram_layer_ids"]:
        weight = tensors[f"model.layers.{layer}.engram.embed.weight"]
        scale = tensors[f"model.layers.{layer}.engram.embed.scale"]
        ids = torch.randint(0, weight.shape[0], (3, 500))
        hbm = create_table("hbm", weight, scale)
        assert torch.equal(
            _lookup_all(tmp_path / "ssd", layer, config["engram_head_dim"], ids), hbm.lookup(ids)
        )


def test_processes_sharing_a_table_convert_it_once(tmp_path: Path) -> None:
    """Two processes (say two TP ranks) create the same ssd table at once: one writes
    it, the other waits and reuses it; both serve the same rows."""
    weight, scale = random_table(30_000, 256)
    torch.save({"weight": weight, "scale": scale}, tmp_path / "rows.pt")
    go = tmp_path / "go"
    script = (
        "import os, sys, time, torch\n"
        "from engram.tables import create_table\n"
        "rows = torch.load(sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "while not os.path.exists(sys.argv[3]): time.sleep(0.001)\n"
        "create_table('ssd', rows['weight'], rows['scale'], path=sys.argv[2])\n"
    )
    argv = [sys.executable, "-c", script, str(tmp_path / "rows.pt"), str(tmp_path / "t"), str(go)]
    children = [
        subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for child in children:  # both loaded: start them together
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    go.touch()
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-2000:]
    ids = torch.randint(0, weight.shape[0], (500,))
    hbm = create_table("hbm", weight, scale)
    with create_table("ssd", None, None, path=tmp_path / "t") as table:
        assert torch.equal(table.lookup(ids).view(torch.int16), hbm.lookup(ids).view(torch.int16))
    assert not (tmp_path / "t.partial").exists()
