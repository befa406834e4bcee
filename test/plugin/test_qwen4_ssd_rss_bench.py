"""``benchmark/qwen4_ssd_rss.py`` without a server: the table size it asks the tiny
checkpoint for, the process-tree memory it samples, and its command line refusing bad
input in one line (exit 2) before any work. The measurement itself starts real servers:
a benchmark, not a test."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
import time
from types import ModuleType

import psutil
from engram_testing.qwen4_tiny_options import TinyQwen4Options
from engram_testing.tree_memory import TreeMemory

from engram.files import GIB
from test.ssd.helpers import REPO

SCRIPT = [sys.executable, str(REPO / "benchmark" / "qwen4_ssd_rss.py")]


def _script_module() -> ModuleType:
    """The benchmark script as a module, loaded from its file (``benchmark/`` is no
    package, and nothing is put on ``sys.path`` for it)."""
    spec = importlib.util.spec_from_file_location("qwen4_ssd_rss", SCRIPT[1])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _script_module()


def test_the_table_is_the_size_asked_for():
    gib = random.uniform(0.5, 8.0)
    options = TinyQwen4Options(
        ple_layer_ids=(bench.PLE_LAYER,),
        ngram_vocab_size_base=bench.vocab_base(gib),
        split_ngram_parts=bench.SHARDS,
    )
    assert options.ngram_heads == bench.HEADS
    assert abs(options.table_rows(0) * bench.ROW_BYTES / GIB - gib) < 0.01 * gib


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "file").write_text("x")
    for args, words in (
        (["--placements", "ssd,dram"], "comma list"),
        (["--placements", "ssd,ssd"], "twice"),
        (["--table-gib", "0"], "must be"),
        (["--requests", "-1"], "must be"),
        (["--work", str(tmp_path / "file")], "is a file"),
        (["--table-gib", "1000", "--placements", "ssd", "--work", str(tmp_path)], "GiB"),
    ):
        out = subprocess.run([*SCRIPT, *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and words in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["file"]  # nothing created


def test_tree_memory_sums_the_tree_and_names_anonymous_memory(tmp_path):
    # NOTE: a stand-in for a server: a process with the launcher's command-line words
    # (found by them, as the sampler finds a server) and a child holding anonymous memory.
    port, mib, ready = random.randint(20000, 60000), random.randint(200, 400), tmp_path / "ready"
    child = f"b = bytearray({mib} << 20); b[::4096] = bytes(len(range(0, {mib} << 20, 4096))); open({str(ready)!r}, 'w').close(); import time; time.sleep(60)"
    parent = f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", parent, "sglang.launch_server", "--port", str(port)])  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        memory = TreeMemory(port)
        sample = memory()
        assert mib << 20 <= sample["anon"] <= sample["rss"] < (mib + 200) << 20
        held = {k.split(" ", 1)[1]: v for k, v in memory.mappings_at_peak.items()}
        assert held["[anon]"] >= mib / 1024
        assert TreeMemory(port + 1)() == {}  # another port: no server found
    finally:
        for p in psutil.Process(proc.pid).children(recursive=True):
            p.kill()
        proc.kill()
        proc.wait()
