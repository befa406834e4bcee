"""``--engram-offload ssd --engram-seed-profile P`` through real SGLang: the tiny model's
tables seed their RAM caches from a profile of a corpus (``python -m engram.profile``)
while the server starts, and the first requests drawn from that corpus find their rows
in RAM. Two servers: without read-ahead (``--no-engram-prefetch``: every lookup asks the
RAM cache, so the lookups' hits show what the seeding gave) and with it (a lookup takes
its rows from the read-ahead's handles, which asked the RAM cache for them: what the
cache served is the lookups' hits plus the read-ahead's, counted apart).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from engram_testing.client import generate_ids, settled_metrics
from engram_testing.reference import agreement_all, load_reference
from engram_testing.server import free_port, launch_command, server_env, sglang_server
from sglang_engram.metrics.names import SSD_COUNTERS

from engram.files import GIB
from engram.model.corpus import split_documents, stdlib_documents
from engram.model.tokenizer import load_tokenizer
from engram.profile import RowProfile
from engram.rows.seed_rows import fitting
from engram.spec import EngramSpec
from engram.ssd.row_cache import RowCache
from test.ssd.helpers import REPO

pytestmark = pytest.mark.slow

RAM_CACHE_GB = 0.004  # NOTE: about half of each tiny table: the seed must choose
NEW_TOKENS = 8
SEEDED = "sglang:engram_ssd_seeded_rows_total"
HITS = "sglang:engram_ssd_ram_cache_hits_total"
AHEAD_HITS = [f"sglang:engram_ssd_ram_cache_{by}_ahead_hits_total" for by in ("prompt", "decode")]
SEEDED_LINE = re.compile(r"Engram layer (\d+) \(profile .*\): seeded (\d+) rows \(([\d.]+) MiB\)")


@pytest.fixture(scope="module")
def tiny(trained_tiny_model) -> Path:
    return trained_tiny_model


@pytest.fixture(scope="module")
def spec(tiny) -> EngramSpec:
    return EngramSpec.from_hf_config(json.loads((tiny / "config.json").read_text()))


@pytest.fixture(scope="module")
def reference(tiny):
    model = load_reference(tiny)
    yield model
    model.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    """The held-out stdlib documents of more than 2,000 characters (~30, 0.3 MB): the
    profiled corpus, written to a folder of .txt files by ``profile``."""
    return [d.text for d in split_documents(stdlib_documents(), "heldout") if len(d.text) > 2000]


@pytest.fixture(scope="module")
def profile(tiny, corpus, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    for i, text in enumerate(corpus):
        (folder / f"doc{i}.txt").write_text(text)
    out = tmp_path_factory.mktemp("profile") / "stdlib.npz"
    done = subprocess.run(
        [sys.executable, "-m", "engram.profile", str(tiny), str(folder), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def servers(tiny, profile, tmp_path_factory) -> Iterator[dict[str, tuple[str, Path]]]:
    """Two seeded ssd servers, started side by side: without read-ahead and with it (the
    default); each yields (its URL, its log). ``--sleep-on-idle``: the idle one spins no
    core."""

    def start(stack: contextlib.ExitStack, name: str, *extra: str) -> tuple[str, Path]:
        log = tmp_path_factory.mktemp("logs") / f"{name}.log"
        args = (
            "--engram-offload", "ssd", "--engram-ssd-dir", str(tmp_path_factory.mktemp("ssd")),
            "--engram-seed-profile", str(profile), "--engram-ram-cache-gb", str(RAM_CACHE_GB),
            "--sleep-on-idle", *extra,
        )  # fmt: skip
        return stack.enter_context(sglang_server(tiny, *args, log=log)), log

    with contextlib.ExitStack() as stack, ThreadPoolExecutor(2) as pool:
        plain = pool.submit(start, stack, "seeded", "--no-engram-prefetch")
        ahead = pool.submit(start, stack, "read-ahead")
        yield {"seeded": plain.result(), "read-ahead": ahead.result()}


@pytest.fixture(scope="module")
def server(servers) -> tuple[str, Path]:
    return servers["seeded"]


@pytest.fixture(scope="module")
def read_ahead_server(servers) -> tuple[str, Path]:
    return servers["read-ahead"]


def _seeded_lines(log: Path, layers: int, timeout_s: float = 120) -> dict[int, tuple[int, float]]:
    """Layer -> (rows, MiB) of each table's one seeding line, once every table said it."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = {int(m[1]): (int(m[2]), float(m[3])) for m in SEEDED_LINE.finditer(log.read_text())}
        if len(found) == layers or time.monotonic() > deadline:
            return found
        time.sleep(1)


def _fit(profile: Path, spec: EngramSpec) -> dict[int, np.ndarray]:
    """The profile's rows each table's RAM cache share holds (what seeding puts there)."""
    ranked = RowProfile.load(profile).rows
    share = int(RAM_CACHE_GB * GIB) // spec.n_layers
    out = {}
    for i, layer in enumerate(spec.layer_ids):
        geometry = RowCache(min(share, spec.table_bytes(i)), spec.row_bytes)
        out[layer] = fitting(ranked[layer], geometry.n_sets, geometry.ways)
    return out


def _prompts(corpus: list[str], tiny: Path, n: int, rng: random.Random) -> list[list[int]]:
    """``n`` windows of 24-64 tokens from the profiled documents, each from its middle."""
    tokenizer = load_tokenizer(tiny)
    out = []
    for text in rng.sample(corpus, n):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        length = rng.randint(24, 64)
        start = rng.randrange(1, len(ids) - length)
        out.append(ids[start : start + length])
    return out


def test_seeded_server_serves_the_profiles_rows_from_ram(
    server, profile, spec, reference, corpus, tiny
) -> None:
    url, log = server
    lines = _seeded_lines(log, spec.n_layers)
    fit = _fit(profile, spec)
    # one INFO line per table when its seeding ends: what fitted its share, its MiB
    assert sorted(lines) == sorted(spec.layer_ids), log.read_text()[-3000:]
    for layer, (rows, mib) in lines.items():
        assert rows == fit[layer].size > 0
        assert abs(mib - rows * spec.row_bytes / (1 << 20)) < 0.06
    before = settled_metrics(url, labelled=True)
    for layer in spec.layer_ids:
        assert before[f"{SEEDED}{{layer={layer}}}"] == fit[layer].size
        assert before[f"sglang:engram_ssd_seed_seconds_total{{layer={layer}}}"] > 0
    prompts = _prompts(corpus, tiny, 4, random.Random())
    served = [generate_ids(url, p, NEW_TOKENS) for p in prompts]
    agree = agreement_all(reference, prompts, served, "both")
    assert agree.all_agree, agree  # the seeded rows are the table's rows, bit for bit
    after = settled_metrics(url, labelled=True)
    hits = _grown(before, after, HITS, spec)
    # the prompts' own rows the seed put in RAM: nearly all of them hit on this first pass
    # (the few lookups before can evict a seeded row only where they admit one)
    seeded_prompt_rows = _seeded_rows_of(prompts, fit, spec, reference)
    assert seeded_prompt_rows > 0
    assert hits >= 0.8 * seeded_prompt_rows, (hits, seeded_prompt_rows)
    assert all(_grown(before, after, name, spec) == 0 for name in AHEAD_HITS)  # none ran


def test_with_read_ahead_the_ram_cache_hits_count_the_read_ahead_s_too(
    read_ahead_server, profile, spec, reference, corpus, tiny
) -> None:
    """The read-ahead takes a prompt's seeded rows from the RAM cache at admission and the
    lookups take them from its handles: the lookups' hits alone under-report what the
    cache served, and the read-ahead's, counted apart, make up the rest."""
    url, log = read_ahead_server
    assert sorted(_seeded_lines(log, spec.n_layers)) == sorted(spec.layer_ids)
    before = settled_metrics(url, labelled=True)
    prompts = _prompts(corpus, tiny, 4, random.Random())
    served = [generate_ids(url, p, NEW_TOKENS) for p in prompts]
    agree = agreement_all(reference, prompts, served, "both")
    assert agree.all_agree, agree
    after = settled_metrics(url, labelled=True)
    lookup_hits = _grown(before, after, HITS, spec)
    prompt_ahead, decode_ahead = (_grown(before, after, name, spec) for name in AHEAD_HITS)
    seeded_prompt_rows = _seeded_rows_of(prompts, _fit(profile, spec), spec, reference)
    assert seeded_prompt_rows > 0
    # the read-ahead found the prompts' seeded rows in the RAM cache: first-pass hits of
    # lookups and read-ahead together cover most of them
    assert prompt_ahead > 0, (lookup_hits, prompt_ahead, decode_ahead)
    assert lookup_hits + prompt_ahead + decode_ahead >= 0.8 * seeded_prompt_rows, (
        lookup_hits, prompt_ahead, decode_ahead, seeded_prompt_rows,
    )  # fmt: skip
    misses = [f"sglang:engram_ssd_ram_cache_{by}_ahead_misses_total" for by in ("prompt", "decode")]
    assert _grown(before, after, misses[0], spec) > 0  # a prompt's unseeded rows
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        text = r.read().decode()
    for name, (key, doc) in SSD_COUNTERS.items():
        if "_ahead_" in key:  # the new counters, each with its help text
            assert f"# HELP {name}_total {doc}" in text, name


def _grown(before: dict, after: dict, name: str, spec: EngramSpec) -> float:
    """How much counter ``name`` grew, summed over the layers."""
    return sum(
        after.get(f"{name}{{layer={layer}}}", 0) - before.get(f"{name}{{layer={layer}}}", 0)
        for layer in spec.layer_ids
    )


def _seeded_rows_of(prompts, fit: dict[int, np.ndarray], spec: EngramSpec, reference) -> int:
    """The distinct rows each prompt's prefill looks up in each table that seeding put there."""
    return sum(
        np.intersect1d(reference.hasher.hash(torch.tensor(p))[:, i].reshape(-1).numpy(),
                       fit[layer]).size
        for p in prompts
        for i, layer in enumerate(spec.layer_ids)
    )  # fmt: skip


@pytest.mark.parametrize("case", ["dram placement", "another model's profile"])
def test_a_bad_seed_profile_stops_the_launch_in_one_line(tiny, profile, tmp_path, case) -> None:
    """The launcher's start-up checks refuse it before any process is spawned."""
    if case == "dram placement":
        args = ["--engram-offload", "dram", "--engram-seed-profile", str(profile)]
        expected = "seeds the RAM cache of ssd tables, but this server's placement is dram"
    else:
        other = RowProfile.load(profile)
        moved = dataclasses.replace(other.identity, token_map_digest="0" * 16)
        wrong = tmp_path / "other.npz"
        RowProfile(moved, other.top, other.rows, other.counts, other.corpus).save(wrong)
        args = ["--engram-offload", "ssd", "--engram-ssd-dir", str(tmp_path / "ssd"),
                "--engram-seed-profile", str(wrong)]  # fmt: skip
        expected = f"was not made for {tiny}: it was made with another tokenizer"
    done = subprocess.run(
        launch_command(tiny, free_port(), *args),
        capture_output=True,
        text=True,
        timeout=300,
        env=server_env(),
    )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "sglang-engram: error:" in line]
    assert len(errors) == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == errors[0]  # the last word, one line
    assert errors[0].startswith("sglang-engram: error: --engram-seed-profile ")
    assert expected in errors[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "ssd").exists()
