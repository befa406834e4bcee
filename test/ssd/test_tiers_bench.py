"""The pieces of ``benchmark/bench_serving_tiers.py`` that need no server: real-text
prompt files, SGLang's own sampler reading them back, the RAM-cache curve, and the
page-cache residency of table files. (The servers it drives are tested in
``test/serving``; the benchmark's timings are not a test.)"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test.ssd.helpers import REPO

sys.path.insert(0, str(REPO / "benchmark"))

from tiers_report import drop_page_cache, resident_fraction  # noqa: E402
from tiers_workload import cache_curve, served_prompts, write_datasets  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("model") / "m"
    subprocess.run(
        [sys.executable, "-m", "engram.model", "build", "--random", "--engram-table-gib", "0.02",
         "--seed", str(random.randint(0, 1000)), "--out", str(out)],
        check=True, capture_output=True, cwd=REPO,
    )  # fmt: skip
    return out


def test_prompts_are_disjoint_heldout_source_and_sglang_sends_them(model, tmp_path) -> None:
    input_len = random.randint(48, 96)
    files = write_datasets(model, tmp_path, {"c1": 3, "c8": 5}, input_len)
    texts = {c: [r["conversations"][0]["value"] for r in json.loads(p.read_text())] for c, p in files.items()}  # fmt: skip
    assert len(texts["c1"]) == 3 and len(texts["c8"]) == 5
    assert not set(texts["c1"]) & set(texts["c8"])
    prompts = served_prompts(files["c8"], model, 5, input_len, 16, 1.0, seed=random.randint(0, 99))
    assert len(prompts) == 5
    assert all(0 < len(p) <= input_len for p in prompts)
    assert len({tuple(p) for p in prompts}) == 5


def test_cache_curve_grows_with_size_and_is_bounded_by_the_unbounded_cache(model, tmp_path) -> None:
    files = write_datasets(model, tmp_path, {"c4": 12}, 128)
    prompts = served_prompts(files["c4"], model, 12, 128, 16, 1.0, seed=3)
    fractions = [1 / 64, 1 / 8, 1 / 2]
    curve = cache_curve(model, prompts, fractions)
    ratios = [p["hit_ratio"] for p in curve["points"]]
    assert ratios == sorted(ratios)
    assert 0 < ratios[-1] <= curve["unbounded_hit_ratio"] + 1e-9
    # real text repeats n-grams: a cache of half the table catches most repeats
    assert ratios[-1] > 0.8 * curve["unbounded_hit_ratio"]
    assert curve["distinct_rows"] < curve["row_lookups"]


def test_page_cache_residency_is_measured_and_dropped(tmp_path) -> None:
    path = tmp_path / "rows.bin"
    data = np.random.default_rng().integers(0, 255, 4 << 20, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    with open(path, "rb") as f:
        f.read()
        os.fsync(f.fileno())
    assert resident_fraction([path]) > 0.5
    drop_page_cache([path])
    assert resident_fraction([path]) < 0.5
