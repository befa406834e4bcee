"""A tiny random Qwen3.8-Flash-Next (``qwen4_exp``) served by real SGLang on its CPU
engine (Gated DeltaNet and norm kernels the ``sgl_kernel`` stand-in's torch ops) in every
``--engram-offload`` placement: five servers, started at once and shared by the tests.

- ``hbm``: upstream's device table (``--ple-offload-embedding`` resolves off on a CPU).
  Its served greedy tokens are checked against a teacher-forced pass of itself: the
  prompt plus the served tokens in one prefill, whose per-position top token must be
  each served token, or within ``TIE`` of it.
- ``dram`` (upstream's table in host memory, as the CPU engine builds it) and ``ssd``
  (ours, converted from the checkpoint into ``--engram-ssd-dir`` on first start, read
  through a small RAM cache, prefilling ``CHUNK`` tokens at a time): their served tokens
  teacher-forced on the ``hbm`` server.
- ``off``: the PLE layers add nothing. Its greedy tokens are those of ``ple-less``, an
  ``hbm`` server of a twin checkpoint whose PLE value projections are zero, and unlike
  the ``hbm`` server's.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from engram_testing.client import flush_prefix_cache, generate_ids, metrics, settled_metrics
from engram_testing.qwen4_tiny_checkpoint import WEIGHTS_FILE, write_tiny_checkpoint
from engram_testing.server import sglang_server
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from sglang_engram.protocol.registry import table_tensor_layer

from engram.ssd.checkpoint_formats.ple_config import PleConfig
from test.serving.qwen4_served import (
    ARGS,
    NEW_TOKENS,
    TIE,
    VOCAB,
    assert_agree,
    prefill_logprobs,
    random_prompts,
    teacher_forced_gaps,
)
from test.serving.request_fuzz import fuzz_and_check, target_of, walk_away

pytestmark = pytest.mark.slow

CHUNK = 32
# NOTE: 10 MiB: the tiny tables' rows all fit; the cache is exercised, not its eviction
RAM_CACHE_GB = "0.01"
ROWS = "sglang:engram_rows_requested_total"
SERVED_BY = "Qwen3.8-Flash-Next's PLE n-gram tables served by"


@dataclass(frozen=True)
class Served:
    url: str
    log: Path
    startup_s: float


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(
        tmp_path_factory.mktemp("qwen4") / "tiny", seed=random.randrange(1 << 30)
    )


@pytest.fixture(scope="module")
def ple_less(checkpoint, tmp_path_factory) -> Path:
    """The same checkpoint with every PLE value projection zero: PLE adds nothing."""
    twin = tmp_path_factory.mktemp("qwen4") / "ple-less"
    twin.mkdir()
    for path in checkpoint.iterdir():
        (twin / path.name).write_bytes(path.read_bytes())
    tensors = load_file(checkpoint / WEIGHTS_FILE)
    zeroed = [name for name in tensors if name.endswith(".ple.value_proj.weight")]
    assert zeroed
    for name in zeroed:
        tensors[name] = tensors[name].zero_()
    save_file(tensors, str(twin / WEIGHTS_FILE), metadata={"format": "pt"})
    return twin


@pytest.fixture(scope="module")
def ssd_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ssd")


@contextlib.contextmanager
def _serve(model: Path, log: Path, *args: str) -> Iterator[Served]:
    start = time.monotonic()
    with sglang_server(model, *ARGS, *args, log=log, timeout_s=900) as url:
        yield Served(url, log, time.monotonic() - start)


@pytest.fixture(scope="module")
def servers(checkpoint, ple_less, ssd_dir, tmp_path_factory) -> Iterator[dict[str, Served]]:
    """The module's five servers, started at once (each start is mostly imports and
    compiling; on a 2-core machine five together take about three times one)."""
    logs = tmp_path_factory.mktemp("logs")
    ssd = ("--engram-ssd-dir", str(ssd_dir), "--engram-ram-cache-gb", RAM_CACHE_GB)
    plans = {
        "hbm": (checkpoint, "hbm"),
        "dram": (checkpoint, "dram"),
        "ssd": (checkpoint, "ssd", *ssd, "--chunked-prefill-size", str(CHUNK)),
        "off": (checkpoint, "off"),
        "ple-less": (ple_less, "hbm"),
    }
    serving = {
        name: _serve(model, logs / f"{name}.log", "--engram-offload", *args)
        for name, (model, *args) in plans.items()
    }
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(len(serving)) as pool:
        started = {name: pool.submit(plan.__enter__) for name, plan in serving.items()}
        for name, future in started.items():
            if future.exception() is None:
                stack.push(serving[name].__exit__)
        yield {name: future.result() for name, future in started.items()}


def _serve_all(url: str, prompts: list[list[int]]) -> list[list[int]]:
    return [generate_ids(url, p, NEW_TOKENS) for p in prompts]


def test_hbm_serves_what_its_teacher_forced_pass_computes(servers):
    hbm = servers["hbm"]
    prompts = random_prompts(random.Random(), 6)
    begin = time.monotonic()
    served = _serve_all(hbm.url, prompts)
    elapsed = time.monotonic() - begin
    print(
        f"qwen4_exp CPU engine: startup {hbm.startup_s:.0f} s (five at once), "
        f"{len(prompts) * NEW_TOKENS / elapsed:.1f} tok/s one request at a time"
    )
    assert_agree("hbm vs itself", teacher_forced_gaps(hbm.url, prompts, served))
    assert len({tuple(s) for s in served}) > 1  # not one constant continuation
    log = hbm.log.read_text()
    # the CPU-safe resolution (the plugin's hook) and upstream's device table on a CPU
    assert "'mamba_radix_cache_strategy': 'no_buffer'" in log
    assert "'disable_overlap_schedule': True" in log and "'ple_offload_embedding': False" in log


@pytest.mark.parametrize("placement", ["dram", "ssd"])
def test_placement_serves_what_hbm_computes(servers, placement):
    # NOTE: prompts up to 2 * CHUNK tokens: the ssd server prefills some in chunks
    prompts = random_prompts(random.Random(), 6, hi=2 * CHUNK)
    served = _serve_all(servers[placement].url, prompts)
    assert_agree(f"{placement} on hbm", teacher_forced_gaps(servers["hbm"].url, prompts, served))


def test_ssd_chunked_prefill_gives_hbm_whole_prefill(servers):
    ssd, hbm = servers["ssd"], servers["hbm"]
    worst = 0.0
    for prompt in random_prompts(random.Random(), 3, lo=3 * CHUNK + 5, hi=5 * CHUNK):
        whole = prefill_logprobs(hbm.url, prompt, 1)
        split = prefill_logprobs(ssd.url, prompt, 1)
        worst = max(worst, *(abs(a[0] - b[0]) for a, b in zip(whole, split, strict=True)))
    print(f"ssd, {CHUNK}-token chunks vs hbm whole: worst log-probability difference {worst:.3f}")
    assert worst <= TIE
    assert f"#new-token: {CHUNK}," in ssd.log.read_text()  # prefilled chunk by chunk


def test_off_serves_the_model_without_ple(servers):
    prompts = random_prompts(random.Random(), 4)
    served = _serve_all(servers["off"].url, prompts)
    # NOTE: token for token, not teacher-forced: ``off`` and ``ple-less`` run the same
    # decode steps on the same shapes, one adding nothing, the other adding a PLE output
    # of exact zeros, so their logits are the same bits (measured: 44 of 44 prompts).
    # A teacher-forced pass adds the prefill-against-decode noise and its rare outliers.
    assert served == _serve_all(servers["ple-less"].url, prompts)
    on_hbm = teacher_forced_gaps(servers["hbm"].url, prompts, served)
    print(f"off on hbm: {sum(g > TIE for g in on_hbm)}/{len(on_hbm)} tokens disagree")
    assert sum(g > TIE for g in on_hbm) >= 0.2 * len(on_hbm), on_hbm
    assert not any(k.startswith(ROWS) and v for k, v in metrics(servers["off"].url).items())


def test_ssd_table_is_converted_read_and_counted(servers, checkpoint, ssd_dir):
    ple = PleConfig.from_config(json.loads((checkpoint / "config.json").read_text()))
    assert ple.layer_ids
    assert sorted(p.name for p in ssd_dir.iterdir()) == [f"layer{i}" for i in ple.layer_ids]
    url = servers["ssd"].url
    prompts = random_prompts(random.Random(), 3, hi=2 * CHUNK)
    before = settled_metrics(url, labelled=True)
    flush_prefix_cache(url)
    _serve_all(url, prompts)
    # each request looks up its prompt, then every new token but the last, at every PLE
    # layer: one row per n-gram head
    rows = sum(len(p) + NEW_TOKENS - 1 for p in prompts) * ple.ngram_heads
    keys = [f"{ROWS}{{layer={i}}}" for i in ple.layer_ids]
    after = settled_metrics(url, True, {k: before.get(k, 0) + rows for k in keys})
    for key in keys:
        assert after[key] - before.get(key, 0) == rows, (key, before, after)
    on_disk = sum(p.stat().st_size for p in ssd_dir.rglob("rows.bin"))
    assert after["sglang:engram_table_bytes{tier=ssd}"] == on_disk
    assert after["sglang:engram_table_bytes{tier=hbm}"] == 0
    assert not any(v for k, v in after.items() if k.startswith("sglang:engram_ssd_io_errors"))


def test_logs_name_family_placement_code_and_skipped_tables(servers, checkpoint):
    with safe_open(str(checkpoint / WEIGHTS_FILE), framework="pt") as f:
        tables = sum(table_tensor_layer(name) is not None for name in f.keys())  # noqa: SIM118
    assert tables
    upstream = "upstream SGLang's Qwen4ExpNGramEmbedding"
    served_by = {
        "hbm": f"{upstream} (device table)",
        "dram": f"{upstream} (Qwen4ExpPinnedHostEmbedding, pinned host table; on SGLang's CPU "
        "engine its table in host memory)",
        "ssd": "sglang-engram's tables",
        "off": "sglang-engram's tables",
    }
    for placement, code in served_by.items():
        log = servers[placement].log.read_text()
        assert f"Engram placement for this single server: {placement}" in log, placement
        assert f"{SERVED_BY} {code}" in log, placement
        # ssd and off never read the table tensors; hbm and dram load them
        skipped = f"sglang-engram: left {tables} table tensors unread" in log
        assert skipped == (placement in ("ssd", "off")), placement
        assert ("table tensors unread" in log) == skipped, placement
    off_log = servers["off"].log.read_text()
    assert "PLE table in off: sglang-engram's tables, nothing held" in off_log
    # a single server without its table is not the released model: said once, as a warning
    assert off_log.count("--engram-offload off on a single server: ") == 1
    assert "--engram-offload off on a" not in servers["hbm"].log.read_text()


def _target(servers, placement: str):
    url = servers[placement].url
    prompt = random_prompts(random.Random(5), 1)[0]
    return target_of(f"Qwen3.8-Flash-Next, {placement}", url, (url,), VOCAB, prompt)


@pytest.mark.parametrize("placement", ["hbm", "dram", "ssd", "off"])
def test_fuzzed_requests_are_refused_or_served_and_never_kill_the_server(servers, placement):
    summary = fuzz_and_check(_target(servers, placement))
    assert summary["kinds_tried"] == summary["kinds_defined"] >= 40, summary


def test_clients_that_go_away_free_their_slots(servers):
    walk_away(_target(servers, "dram"), streams=3, aborts=6)
