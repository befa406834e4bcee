"""``python -m engram.convert``: bit-identical round trip, checksums, crash + resume,
tables of other rows converted again, disk space."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engram.errors import EngramTableError
from engram.model.builder import BuildOptions, build_tiny_model
from engram.ssd.converter import convert_checkpoint
from engram.ssd.layout import DiskLayout
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
    partial = tmp_path / "ssd" / "layer1.partial"
    progress = json.loads((partial / "progress.json").read_text())
    assert 0 < len(progress["chunk_crc32"]) < 12
    assert sorted(os.listdir(tmp_path / "ssd")) == [".layer1.lock", "layer1.partial"]

    resumed = run_convert(*args)
    assert resumed.returncode == 0, resumed.stderr
    written = len(progress["chunk_crc32"]) * (256 << 10) // 4096 * 4096
    assert f"layer1: half written ({written:,} bytes), resuming" in resumed.stdout
    assert "layer3: not converted yet" in resumed.stdout
    assert sorted(os.listdir(tmp_path / "ssd")) == ["layer1", "layer3", "manifest.json"]
    for layer, (weight, scale) in tables.items():
        ids = torch.randint(0, weight.shape[0], (2000,))
        dram = create_table("dram", weight, scale, device="cpu")
        with create_table(
            "ssd", None, None, path=tmp_path / "ssd", layer=layer, verify="full"
        ) as t:
            assert torch.equal(t.lookup(ids), dram.lookup(ids))


def test_tables_of_other_rows_are_converted_again(tmp_path: Path) -> None:
    config = tiny_spec_config()
    a_tables = write_checkpoint(tmp_path / "a", config)
    b_tables = write_checkpoint(tmp_path / "b", config)  # same shapes, other rows
    logged: list[str] = []
    convert_checkpoint(tmp_path / "a", tmp_path / "ssd", log=logged.append, show_progress=False)
    data = tmp_path / "ssd" / "layer1" / "rows.bin"
    stamp = (data.stat().st_ino, data.stat().st_mtime_ns)
    convert_checkpoint(tmp_path / "a", tmp_path / "ssd", log=logged.append)
    assert "already converted" in logged[-1]
    assert (data.stat().st_ino, data.stat().st_mtime_ns) == stamp  # reused, not rewritten
    logged.clear()
    convert_checkpoint(tmp_path / "b", tmp_path / "ssd", log=logged.append, show_progress=False)
    again = f"converting the SSD table {tmp_path / 'ssd' / 'layer1'} again from the checkpoint: "
    assert any(line.startswith(f"{again}it was converted from other rows") for line in logged)
    for layer, (weight, scale) in b_tables.items():
        ids = torch.randint(0, weight.shape[0], (400,))
        dram = create_table("dram", weight, scale, device="cpu")
        assert torch.equal(_lookup_all(tmp_path / "ssd", layer, 64, ids), dram.lookup(ids))
    # A half-written table of other rows is started over, not resumed.
    shutil.copytree(tmp_path / "ssd" / "layer1", tmp_path / "o" / "layer1.partial")
    (tmp_path / "o" / "layer1.partial" / "manifest.json").unlink()
    (tmp_path / "o" / "layer1.partial" / "progress.json").write_text(
        json.dumps({"source": {}, "layout": [1, 64, 1], "chunk_crc32": [1, 2]})
    )
    logged.clear()
    convert_checkpoint(tmp_path / "a", tmp_path / "o", log=logged.append, show_progress=False)
    assert "layer1: not converted yet" in logged
    weight, scale = a_tables[1]
    ids = torch.randint(0, weight.shape[0], (400,))
    with create_table("ssd", None, None, path=tmp_path / "o", layer=1, verify="full") as t:
        assert torch.equal(t.lookup(ids), create_table("dram", weight, scale).lookup(ids))


def _in_small_tmpfs(tmp_path: Path, command: list[str], then: str) -> subprocess.CompletedProcess:
    """Run ``command``, then the shell line ``then``, with ``tmp_path/small`` a 2 MiB
    tmpfs of a private mount namespace (skip the test where that cannot be mounted)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs")
    small = tmp_path / "small"
    small.mkdir()
    script = f"mount -t tmpfs -o size=2m tmpfs {small} || exit 77; {shlex.join(command)}; "
    script += f"echo rc=$?; {then}"
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if run.returncode == 77 or "rc=" not in run.stdout:
        pytest.skip(f"cannot mount a private tmpfs here: {run.stderr.strip()}")
    return run


def test_out_of_space_is_refused_before_writing(tmp_path: Path) -> None:
    config = tiny_spec_config(vocab=6000)  # ~3 MiB of rows per layer
    write_checkpoint(tmp_path / "ckpt", config)
    needed = sum(DiskLayout(rows, 64).file_bytes for rows in config["engram_num_embeddings"])
    out = tmp_path / "small" / "ssd"
    command = [*convert_command(tmp_path / "ckpt", out)[:-2], "--quiet"]  # space checked
    run = _in_small_tmpfs(tmp_path, command, f"ls -A {out}")
    assert "rc=1" in run.stdout
    line = f"not enough disk space for the SSD tables: needs 0.01 GiB ({needed:,} bytes)"
    assert line in run.stderr  # the page-padded size of both tables
    assert run.stdout.split("rc=1", 1)[1].split() == []  # nothing written


def test_disk_filling_up_mid_write_fails_cleanly(tmp_path: Path) -> None:
    config = tiny_spec_config(vocab=6000)
    write_checkpoint(tmp_path / "ckpt", config)
    out = tmp_path / "small" / "ssd"
    # The free-space check skipped: the converter really gets ENOSPC.
    command = convert_command(tmp_path / "ckpt", out)
    run = _in_small_tmpfs(tmp_path, command, f"cat {out}/layer1.partial/progress.json")
    assert "rc=1" in run.stdout
    assert "the disk filled while writing" in run.stderr and "No space left on device" in run.stderr
    assert "run again to resume" in run.stderr
    kept = json.loads(run.stdout.split("rc=1", 1)[1])
    assert len(kept["chunk_crc32"]) >= 1  # finished chunks are kept for the resume


def test_a_missing_checkpoint_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-checkpoint"
    result = run_convert("--checkpoint", str(missing), "--out", str(tmp_path / "ssd"))
    assert result.returncode == 2  # bad input (a full disk is 1)
    assert result.stderr.startswith(f"error: checkpoint directory {missing} does not exist")
    assert result.stderr.count("\n") == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(EngramTableError, match="no \\*.safetensors files in checkpoint"):
        convert_checkpoint(tmp_path / "empty", tmp_path / "ssd")
    assert not (tmp_path / "ssd").exists()


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
