"""A tiny random Qwen3.8-Flash-Next (``qwen4_exp``) ssd server through real SGLang, seeded
from a profile of held-out stdlib text (``python -m engram.profile`` through the PLE
hash) and writing the profile of what it serves (``--engram-profile-out``): its RAM
caches hold the profile's hottest rows that fit, the prompts drawn from that text find
them there, and the served profile counts exactly the PLE rows the requests looked up.

NOTE: ``--no-engram-prefetch``: with the read-ahead on, a lookup takes its rows from the
read-ahead's handles and the RAM cache counts no hit (``test_seeded_ssd.py``).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import pytest
from engram_testing.client import flush_prefix_cache, generate_ids, settled_metrics
from engram_testing.profile_cli import run_profile
from engram_testing.qwen4_tiny_checkpoint import write_tiny_checkpoint
from engram_testing.server import sglang_server

from engram.files import GIB
from engram.model.corpus import split_documents, stdlib_documents
from engram.profile import RowProfile, load_tokenizer, profile_hash
from engram.row_formats import E4m3TensorScaleRows
from engram.rows.seed_rows import fitting
from engram.ssd.checkpoint_formats.ple_config import PleConfig
from engram.ssd.row_cache import RowCache
from test.serving.qwen4_served import ARGS, assert_agree, teacher_forced_gaps

pytestmark = pytest.mark.slow

NEW_TOKENS = 8
RAM_CACHE_GB = 2.0**-14  # NOTE: 32 KiB per table, about half of each tiny PLE table
ROWS = "sglang:engram_rows_requested_total"
SEEDED = "sglang:engram_ssd_seeded_rows_total"
HITS = "sglang:engram_ssd_ram_cache_hits_total"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("qwen4") / "tiny"
    return write_tiny_checkpoint(out, seed=random.randrange(1 << 30))


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return [d.text for d in split_documents(stdlib_documents(), "heldout") if len(d.text) > 2000]


def _profile_when(path: Path, totals: dict[int, int], timeout_s: float = 60) -> RowProfile:
    deadline = time.monotonic() + timeout_s
    while True:
        if path.exists():
            profile = RowProfile.load(path)
            if {layer: int(c.sum()) for layer, c in profile.counts.items()} == totals:
                return profile
        assert time.monotonic() < deadline, (path, totals)
        time.sleep(0.5)


def test_a_seeded_ple_server_serves_the_profiles_rows_and_profiles_them(
    checkpoint, corpus, tmp_path
) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i, text in enumerate(corpus):
        (folder / f"doc{i}.txt").write_text(text)
    seed = tmp_path / "stdlib.npz"
    done = run_profile(str(checkpoint), str(folder), "--out", str(seed))
    assert done.returncode == 0, done.stderr
    config = json.loads((checkpoint / "config.json").read_text())
    ple = PleConfig.from_config(config)
    tokenizer = load_tokenizer(checkpoint)
    hasher, identity = profile_hash(checkpoint, config, tokenizer)
    profile = RowProfile.load(seed)
    assert profile.identity == identity and identity.layers == ple.layer_ids
    row_bytes = E4m3TensorScaleRows(ple.head_dim).row_bytes
    fit = {}
    for layer in ple.layer_ids:
        share = min(int(RAM_CACHE_GB * GIB) // len(ple.layer_ids), ple.num_rows(layer) * row_bytes)
        cache = RowCache(share, row_bytes)
        fit[layer] = fitting(profile.rows[layer], cache.n_sets, cache.ways)
        assert 0 < fit[layer].size < profile.rows[layer].size  # the seed chose
    out = tmp_path / "served.npz"
    rng = random.Random()
    prompts = []
    for text in rng.sample(corpus, 4):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        start = rng.randrange(1, len(ids) - 64)
        prompts.append(ids[start : start + rng.randint(24, 64)])
    args = (
        "--engram-offload", "ssd", "--engram-ssd-dir", str(tmp_path / "ssd"),
        "--engram-ram-cache-gb", str(RAM_CACHE_GB), "--no-engram-prefetch",
        "--engram-seed-profile", str(seed), "--engram-profile-out", str(out),
    )  # fmt: skip
    with sglang_server(checkpoint, *ARGS, *args, log=tmp_path / "ssd.log", timeout_s=900) as url:
        wants = {f"{SEEDED}{{layer={layer}}}": fit[layer].size for layer in ple.layer_ids}
        before = settled_metrics(url, labelled=True, wants=wants, timeout_s=120)
        assert {k: before.get(k) for k in wants} == wants
        served_before = _profile_when(
            out, {layer: int(before[f"{ROWS}{{layer={layer}}}"]) for layer in ple.layer_ids}
        )
        flush_prefix_cache(url)
        served = [generate_ids(url, p, NEW_TOKENS) for p in prompts]
        rows = [hasher.prompt_rows(p + s[:-1]) for p, s in zip(prompts, served, strict=True)]
        after = settled_metrics(url, labelled=True)
        want = {
            layer: sum(
                np.bincount(r[:, i].reshape(-1).numpy(), minlength=ple.num_rows(layer))
                for r in rows
            )
            for i, layer in enumerate(ple.layer_ids)
        }
        totals = {k: int(served_before.counts[k].sum() + w.sum()) for k, w in want.items()}
        assert totals == {k: after[f"{ROWS}{{layer={k}}}"] for k in ple.layer_ids}
        written = _profile_when(out, totals)
        for layer in ple.layer_ids:
            added = np.zeros(ple.num_rows(layer), dtype=np.int64)
            np.add.at(added, written.rows[layer], written.counts[layer])
            np.subtract.at(added, served_before.rows[layer], served_before.counts[layer])
            assert np.array_equal(added, want[layer]), layer  # row by row, these requests'
        hits = sum(
            after[f"{HITS}{{layer={layer}}}"] - before.get(f"{HITS}{{layer={layer}}}", 0)
            for layer in ple.layer_ids
        )
        seeded_prompt_rows = sum(
            np.intersect1d(r[: len(p), i].reshape(-1).numpy(), fit[layer]).size
            for p, r in zip(prompts, rows, strict=True)
            for i, layer in enumerate(ple.layer_ids)
        )
        assert seeded_prompt_rows > 0
        assert hits >= 0.8 * seeded_prompt_rows, (hits, seeded_prompt_rows)
        assert_agree("seeded ssd vs itself", teacher_forced_gaps(url, prompts, served))
