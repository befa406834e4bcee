"""Replacing converted tables is atomic: ``engram.convert`` of another checkpoint into a
directory of valid tables builds the new ones beside the old and swaps each in only
when it is complete and verified. Killed at any moment (SIGINT or SIGKILL), every layer
is still the old valid table or the new one, and the same command then finishes. For
both families' checkpoints: DeepSeek-V4.1-style Engram tables and Qwen3.8-Flash-Next's
PLE shards (layers 1 and 3 in both)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engram.ssd.checkpoint import find_tables
from engram.ssd.integrity import verify_table
from engram.ssd.manifest import TableManifest
from test.ssd.helpers import (
    REPO,
    crash_convert,
    run_convert,
    tiny_spec_config,
    write_checkpoint,
)
from test.ssd.ple_checkpoint import write_ple_checkpoint

INTERRUPTED = "interrupted; run the same command to resume"


def _args(checkpoint: Path, out: Path) -> list[str]:
    return ["--checkpoint", str(checkpoint), "--out", str(out), "--chunk-mib", "0.0625", "--quiet"]


def _identities(checkpoint: Path) -> dict[int, dict]:
    return {layer: rows.identity() for layer, rows in find_tables(checkpoint).items()}


def _state(out: Path, old: dict[int, dict], new: dict[int, dict]) -> dict[int, str]:
    """Which checkpoint each layer's table holds ("old" / "new"), each fully verified."""
    held = {}
    for layer in old:
        path = out / f"layer{layer}"
        assert path.is_dir(), f"{path} is gone: {sorted(os.listdir(out))}"
        manifest = TableManifest.load(path)
        verify_table(path, manifest, "full")
        held[layer] = {old[layer]["sample_crc32"]: "old", new[layer]["sample_crc32"]: "new"}[
            manifest.source["sample_crc32"]
        ]
    return held


def _convert_then_kill(args: list[str], sig: int, delay: float) -> tuple[int, str, float]:
    """Run ``python -m engram.convert ARGS`` and send it ``sig`` ``delay`` s after it
    starts writing; (exit status, stderr, seconds from the start of writing to the
    "published" line)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "engram.convert", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("converting from"):
            break
    start = time.monotonic()
    if delay < 0:  # no signal: how long the writing takes
        for line in child.stdout:
            if line.startswith("published"):
                break
        seconds = time.monotonic() - start
    else:
        time.sleep(delay)
        child.send_signal(sig)
        seconds = delay
    _, err = child.communicate(timeout=120)
    return child.returncode, err, seconds


@pytest.fixture
def family(request: pytest.FixtureRequest) -> str:
    """The checkpoint's family (parametrized indirectly)."""
    return request.param


def _write(family: str, directory: Path, engram_vocab: int = 12_000) -> None:
    """A checkpoint of a few MiB a table: Engram (~100k rows, ~7 MiB, at the default
    vocabulary) or fp8 PLE (~400k rows, ~6 MiB)."""
    if family == "engram":
        write_checkpoint(directory, tiny_spec_config(vocab=engram_vocab))
    else:
        write_ple_checkpoint(directory, "fp8", base=100_000)


@pytest.fixture
def two_checkpoints(tmp_path: Path, family: str) -> tuple[Path, Path, Path, Path, float]:
    """Checkpoints A and B (same shapes, other rows), A converted into ``out`` (and a
    copy of that), and how long converting B takes once it starts writing."""
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "ssd"
    _write(family, a)
    _write(family, b)
    first = run_convert(*_args(a, out))
    assert first.returncode == 0, first.stderr
    shutil.copytree(out, tmp_path / "pristine")
    code, err, seconds = _convert_then_kill(_args(b, tmp_path / "timing"), 0, -1)
    assert code == 0, err
    return a, b, out, tmp_path / "pristine", seconds


@pytest.mark.slow
# NOTE: PLE only with Ctrl-C: what a kill can interrupt (writer, swap) is the same code for
# both families, and each case takes a minute here.
@pytest.mark.parametrize(
    "family,sig",
    [("engram", signal.SIGINT), ("engram", signal.SIGKILL), ("ple", signal.SIGINT)],
    ids=["engram-SIGINT", "engram-SIGKILL", "ple-SIGINT"],
    indirect=["family"],
)
def test_a_killed_replacement_leaves_old_or_new_tables_and_resumes(two_checkpoints, sig) -> None:
    a, b, out, pristine, seconds = two_checkpoints
    old, new = _identities(a), _identities(b)
    interrupted = 0
    for _ in range(3):
        code, err, _ = _convert_then_kill(_args(b, out), sig, random.uniform(0, seconds))
        held = _state(out, old, new)  # every layer: a whole, valid table, old or new
        said = err == INTERRUPTED + "\n"  # one line, no traceback
        if code == 0 or (code == -signal.SIGINT and not said):
            # The signal came after the end (-SIGINT: while the interpreter shut down).
            assert set(held.values()) == {"new"}, (code, err)
        elif sig == signal.SIGINT:
            # NOTE: 130, or the line and then death by SIGINT when it came while the
            # interpreter shut down (a shell sees 130 either way)
            assert said and code in (130, -signal.SIGINT), (code, err)
        else:
            assert code == -signal.SIGKILL
        interrupted += code != 0
        if "new" in held.values():  # back to A's tables for the next round
            shutil.rmtree(out)
            shutil.copytree(pristine, out)
        # else: the next round resumes the new tables this one left half written
    assert interrupted
    resumed = run_convert(*_args(b, out))
    assert resumed.returncode == 0, resumed.stderr
    assert set(_state(out, old, new).values()) == {"new"}
    assert sorted(os.listdir(out)) == ["layer1", "layer3", "manifest.json"]


@pytest.mark.parametrize("family", ["engram", "ple"], indirect=True)
def test_the_old_table_stays_until_the_new_one_is_complete(tmp_path: Path, family: str) -> None:
    """Interrupted mid-way (a full disk's stand-in: a write limit that kills the child),
    the old tables are still there and valid beside the partial new one."""
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "ssd"
    _write(family, a, engram_vocab=6000)
    _write(family, b, engram_vocab=6000)
    assert run_convert(*_args(a, out)).returncode == 0
    old, new = _identities(a), _identities(b)
    crashed = crash_convert(*_args(b, out))
    assert crashed.returncode == -signal.SIGXFSZ, crashed.stderr
    assert _state(out, old, new) == {1: "old", 3: "old"}
    assert (out / "layer1.partial").is_dir()
    resumed = run_convert(*_args(b, out))
    assert resumed.returncode == 0, resumed.stderr
    again = f"converting the SSD table {out / 'layer1'} again from the checkpoint: it was converted"
    assert f"{again} from other rows" in resumed.stdout
    assert "the new table is half written" in resumed.stdout
    assert _state(out, old, new) == {1: "new", 3: "new"}
