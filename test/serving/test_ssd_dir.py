"""One SSD directory for every tool, and damage in it never served.

A directory converted by ``python -m engram.convert`` is reused, not rewritten, by the
CPU tools (``engram.model generate``, ``engram.eval ablate``) and by a real SGLang
server (``--engram-offload ssd --engram-ssd-dir``). Damage in the middle of a table
fails the CPU tool with one line and is converted away on its next run; on the server
it fails the request that needs the damaged rows with a 5xx while the server goes on
serving, counts in ``sglang:engram_ssd_io_errors_total``, and the next start converts
the table again.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from engram_testing.client import generate_ids, metrics_after, post, settled_metrics
from engram_testing.reference import agreement, load_reference, random_prompts
from engram_testing.server import sglang_server

from engram.ssd.checkpoint import find_tables
from engram.ssd.ensure import decide
from engram.ssd.manifest import TableManifest
from test.ssd.helpers import REPO

IO_ERRORS = "sglang:engram_ssd_io_errors_total"
LAYOUT = ["layer1", "layer3", "manifest.json"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=900
    )


def _stamps(ssd: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of each table's data file: a rewrite changes them."""
    return {
        name: (
            (ssd / name / "rows.bin").stat().st_ino,
            (ssd / name / "rows.bin").stat().st_mtime_ns,
        )
        for name in LAYOUT[:2]
    }


def _damage_blocks(table: Path, blocks: list[int]) -> None:
    """Overwrite ``blocks`` of a table with fresh random bytes, keeping the mtime (the
    disk's damage, not a program's write: a write would stop the table outright)."""
    layout = TableManifest.load(table).layout
    data = table / "rows.bin"
    stamp = data.stat()
    with open(data, "r+b") as f:
        for block in blocks:
            os.pwrite(f.fileno(), os.urandom(layout.block_bytes), block * layout.block_bytes)
    os.utime(data, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


def _blocks(model, ids: list[int], layer_index: int, rows_per_block: int) -> set[int]:
    """The blocks of one Engram layer's table that ``ids`` (a whole sequence) looks up."""
    rows = model.hasher.hash(torch.tensor(ids))[:, layer_index]
    return set((rows.reshape(-1) // rows_per_block).tolist())


@pytest.fixture
def converted(tmp_path: Path, trained_tiny_model: Path) -> tuple[Path, Path]:
    tiny = trained_tiny_model
    ssd = tmp_path / "ssd"
    # Small chunks: the open's quick check reads the first and last chunk only.
    run = _run(
        "engram.convert", "--checkpoint", str(tiny), "--out", str(ssd), "--chunk-mib", "0.25"
    )
    assert run.returncode == 0, run.stderr
    assert sorted(os.listdir(ssd)) == LAYOUT
    return tiny, ssd


@pytest.mark.slow
def test_cpu_tools_and_a_server_reuse_a_converted_dir_and_contain_damage(converted) -> None:
    tiny, ssd = converted
    stamps = _stamps(ssd)
    gen = _run(
        "engram.model", "generate", "--model", str(tiny), "--placement", "ssd",
        "--ssd-dir", str(ssd), "--max-new-tokens", "8", "--device", "cpu", "def ",
    )  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    abl = _run(
        "engram.eval", "ablate", "--model", str(tiny), "--placement", "ssd",
        "--ssd-dir", str(ssd), "--max-samples", "2", "--device", "cpu",
    )  # fmt: skip
    assert abl.returncode == 0, abl.stderr
    assert sorted(os.listdir(ssd)) == LAYOUT and _stamps(ssd) == stamps  # reused as it is

    reference = load_reference(tiny)
    rng = random.Random()
    clean, hit = random_prompts(reference, 2, rng)
    layer1 = ssd / "layer1"
    layout = TableManifest.load(layer1).layout
    args = ("--engram-offload", "ssd", "--engram-ssd-dir", str(ssd), "--skip-server-warmup")
    with sglang_server(tiny, *args, log=ssd.parent / "server1.log") as url:
        assert _stamps(ssd) == stamps  # the server reused the tables too
        served = generate_ids(url, clean, 12)
        assert agreement(reference, clean, served).all_agree
        # Damage blocks the second prompt's prefill needs and the first request never
        # read (nor the open: not in the first or last chunk).
        spared = _blocks(reference, clean + served, 0, layout.rows_per_block)
        edges = set(range(layout.chunk_blocks)) | set(
            range((layout.num_chunks - 1) * layout.chunk_blocks, layout.num_blocks)
        )
        target = sorted(_blocks(reference, hit, 0, layout.rows_per_block) - spared - edges)
        assert target, "the second prompt needs no block of its own"
        _damage_blocks(layer1, target)
        before = settled_metrics(url)
        status, body = post(
            url,
            "/generate",
            {"input_ids": hit, "sampling_params": {"temperature": 0.0, "max_new_tokens": 4}},
        )
        assert 500 <= status < 600, (status, body)
        assert str(layer1) in str(body) and "chunk" in str(body), body
        with urllib.request.urlopen(f"{url}/health", timeout=30) as r:
            assert r.status == 200  # the server goes on serving
        assert generate_ids(url, clean, 12) == served  # rows that are fine still serve
        after = metrics_after(url, before, IO_ERRORS)
        assert after.get(IO_ERRORS, 0) > before.get(IO_ERRORS, 0)
    source = find_tables(tiny)[1]
    decision = decide(layer1, source)
    assert not decision.reuse and "damaged" in decision.why, decision.why

    with sglang_server(tiny, *args, log=ssd.parent / "server2.log") as url:
        now = _stamps(ssd)
        assert now["layer1"] != stamps["layer1"] and now["layer3"] == stamps["layer3"]
        assert agreement(reference, hit, generate_ids(url, hit, 8)).all_agree
    # the server said it in one line: which table, what was wrong, converted again
    log = (ssd.parent / "server2.log").read_text().splitlines()
    [said] = [line for line in log if "again from the checkpoint" in line]
    assert f"converting the SSD table {layer1} again" in said and "found damaged" in said
    assert decide(layer1, source).reuse
    assert sorted(os.listdir(ssd)) == LAYOUT


def test_generate_on_a_damaged_table_fails_in_one_line_then_converts_again(converted) -> None:
    tiny, ssd = converted
    layout = TableManifest.load(ssd / "layer1").layout
    middle = np.arange(layout.chunk_blocks, (layout.num_chunks - 1) * layout.chunk_blocks)
    # Most of the middle chunks, as a disk that lost them would return them.
    _damage_blocks(ssd / "layer1", sorted(random.sample(middle.tolist(), int(0.83 * middle.size))))
    command = (
        "engram.model", "generate", "--model", str(tiny), "--placement", "ssd",
        "--ssd-dir", str(ssd), "--max-new-tokens", "6", "--device", "cpu",
        "class Queue:\n    def __init__(self",
    )  # fmt: skip
    failed = _run(*command)
    assert failed.returncode == 1, failed.stdout
    lines = failed.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: SSD table "), failed.stderr
    assert f"{ssd / 'layer1'}: checksum mismatch" in lines[0] and " chunk " in lines[0]
    again = _run(*command)  # the damaged table was marked: converted again, then served
    assert again.returncode == 0, again.stderr
    [said] = again.stderr.splitlines()  # said in one line
    assert said.startswith(f"converting the SSD table {ssd / 'layer1'} again from the checkpoint")
    assert "found damaged while serving" in said and "checksum mismatch" in said
    dram = _run(*command[:5], "dram", *command[8:])
    assert dram.returncode == 0, dram.stderr
    assert again.stdout == dram.stdout
