"""``--engram-profile-out P`` through real SGLang: an ssd server of the tiny model writes
the profile of the rows it served, its counts those of the rows its requests looked up
(each prompt, then every new token but the last, hashed by the reference model), and a
second server started with ``--engram-seed-profile P`` seeds its RAM caches from it.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from engram_testing.client import flush_prefix_cache, generate_ids, settled_metrics
from engram_testing.reference import agreement_all, load_reference, random_prompts
from engram_testing.server import sglang_server

from engram.files import GIB
from engram.profile import RowProfile
from engram.rows.seed_rows import fitting
from engram.ssd.row_cache import RowCache

pytestmark = pytest.mark.slow

NEW_TOKENS = 8
RAM_CACHE_GB = 0.004  # NOTE: about half of each tiny table: the seed must choose
ROWS = "sglang:engram_rows_requested_total"
SEEDED = "sglang:engram_ssd_seeded_rows_total"


@pytest.fixture(scope="module")
def reference(trained_tiny_model):
    model = load_reference(trained_tiny_model)
    yield model
    model.close()


def _dense(profile: RowProfile, layer: int, num_rows: int) -> np.ndarray:
    out = np.zeros(num_rows, dtype=np.int64)
    out[profile.rows[layer]] = profile.counts[layer]
    return out


def _profile_when(path: Path, totals: dict[int, int], timeout_s: float = 60) -> RowProfile:
    """The profile at ``path`` once each layer's counts add up to ``totals`` (it is
    written 2 s after the lookups settle)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if path.exists():
            profile = RowProfile.load(path)
            found = {layer: int(c.sum()) for layer, c in profile.counts.items()}
            if found == totals:
                return profile
        assert time.monotonic() < deadline, (path, totals)
        time.sleep(0.5)


def test_a_served_profile_counts_the_rows_served_and_seeds_the_next_start(
    trained_tiny_model, reference, tmp_path
) -> None:
    spec, hasher = reference.hasher.spec, reference.hasher
    out, ssd = tmp_path / "profiles" / "served.npz", tmp_path / "ssd"
    ssd_args = ("--engram-offload", "ssd", "--engram-ssd-dir", str(ssd),
                "--engram-ram-cache-gb", str(RAM_CACHE_GB))  # fmt: skip
    prompts = random_prompts(reference, 4, random.Random())
    with sglang_server(
        trained_tiny_model, *ssd_args, "--engram-profile-out", str(out), log=tmp_path / "a.log"
    ) as url:
        # the start's warm-up request looked rows up too: the profile counts them all
        rows = settled_metrics(url, labelled=True)
        before = _profile_when(out, {layer: int(rows[f"{ROWS}{{layer={layer}}}"])
                                     for layer in spec.layer_ids})  # fmt: skip
        flush_prefix_cache(url)
        served = [generate_ids(url, p, NEW_TOKENS) for p in prompts]
        looked_up = [
            hasher.hash(torch.tensor(p + s[:-1])) for p, s in zip(prompts, served, strict=True)
        ]
        want = {
            layer: sum(np.bincount(r[:, i].reshape(-1).numpy(), minlength=n) for r in looked_up)
            for i, (layer, n) in enumerate(zip(spec.layer_ids, spec.num_embeddings, strict=True))
        }
        totals = {layer: int(before.counts[layer].sum() + w.sum()) for layer, w in want.items()}
        after = _profile_when(out, totals)
        rows = settled_metrics(url, labelled=True)
        for i, layer in enumerate(spec.layer_ids):
            n = spec.num_embeddings[i]
            added = _dense(after, layer, n) - _dense(before, layer, n)
            assert np.array_equal(added, want[layer]), layer  # row by row, these requests'
            assert totals[layer] == rows[f"{ROWS}{{layer={layer}}}"]  # and the counters'
        assert after.corpus["served_rows"] == sum(totals.values())
    assert not [p for p in out.parent.iterdir() if p != out]  # one file, no temporary
    assert RowProfile.load(out).corpus == after.corpus  # nothing was left to write at the end

    with sglang_server(
        trained_tiny_model, *ssd_args, "--engram-seed-profile", str(out), log=tmp_path / "b.log"
    ) as url:
        share = int(RAM_CACHE_GB * GIB) // spec.n_layers
        wants = {}
        for i, layer in enumerate(spec.layer_ids):
            cache = RowCache(min(share, spec.table_bytes(i)), spec.row_bytes)
            wants[f"{SEEDED}{{layer={layer}}}"] = fitting(
                after.rows[layer], cache.n_sets, cache.ways
            ).size
        seeded = settled_metrics(url, labelled=True, wants=wants, timeout_s=120)
        assert {k: seeded.get(k) for k in wants} == wants
        assert all(v > 0 for v in wants.values())
        flush_prefix_cache(url)
        again = [generate_ids(url, p, NEW_TOKENS) for p in prompts]
        agree = agreement_all(reference, prompts, again, "both")
        assert agree.all_agree, agree  # the seeded rows are the table's, bit for bit
