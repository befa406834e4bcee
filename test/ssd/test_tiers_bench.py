"""``benchmark/bench_serving_tiers.py``: its pieces that need no server (real-text
prompt files, SGLang's own sampler reading them back, the RAM-cache curve, the
page-cache residency of table files), and the whole script once, small, through real
CPU servers (what it reports, not how fast: timings are not a test)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from engram_testing.bench_text import bench_text
from engram_testing.tiers.cache_curve import cache_curve
from engram_testing.tiers.report import drop_page_cache, resident_fraction
from engram_testing.tiers.workload import prompt_rows, served_prompts, write_datasets

from engram.model.config import TinyEngramConfig
from test.ssd.helpers import REPO


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("model") / "m"
    subprocess.run(
        [sys.executable, "-m", "engram.model", "build", "--random", "--engram-table-gib", "0.02",
         "--seed", str(random.randint(0, 1000)), "--out", str(out)],
        check=True, capture_output=True, cwd=REPO,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def bench_files(tmp_path_factory) -> list[str]:
    """The benchmarks' model, table files and seed profile, in one folder the two runs
    share: the second reuses what the first built (each builds it when alone)."""
    work = tmp_path_factory.mktemp("bench")
    return [
        "--table-gib", "0.02", "--backbone", "random", "--model", str(work / "m"),
        "--ssd-dir", str(work / "ssd"), "--profile", str(work / "profile.npz"),
    ]  # fmt: skip


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


def test_a_seeded_cache_curve_hits_the_rows_it_was_seeded_with(model, tmp_path) -> None:
    """Seeded with the prompts' own rows (in a random order), a cache as large as the
    table serves nearly every lookup from the start; at every size the seed only adds hits."""
    files = write_datasets(model, tmp_path, {"c4": 8}, 96)
    prompts = served_prompts(files["c4"], model, 8, 96, 16, 1.0, seed=5)
    rows = prompt_rows(model, prompts)
    layers = TinyEngramConfig.from_pretrained(model).engram_layer_ids
    rng = np.random.default_rng()
    seed = {
        layer: rng.permutation(np.unique(np.concatenate([p[i] for p in rows])))
        for i, layer in enumerate(layers)
    }
    fractions = [1 / 64, 1 / 8, 1.0]
    plain = cache_curve(model, prompts, fractions)
    seeded = cache_curve(model, prompts, fractions, seed)
    assert seeded["seeded"] and not plain["seeded"]
    for a, b in zip(plain["points"], seeded["points"], strict=True):
        assert b["hit_ratio"] >= a["hit_ratio"]
    assert seeded["points"][-1]["hit_ratio"] > 0.99
    assert plain["points"][-1]["hit_ratio"] == pytest.approx(plain["unbounded_hit_ratio"])


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


def test_disk_probe_reads_the_file_at_each_depth_and_names_bad_input(tmp_path) -> None:
    path = tmp_path / "rows.bin"
    path.write_bytes(np.random.default_rng().integers(0, 255, 8 << 20, dtype=np.uint8).tobytes())
    probe = [sys.executable, str(REPO / "benchmark/disk_probe.py")]
    run = subprocess.run(
        [*probe, "--file", str(path), "--depths", "1,16", "--seconds", "0.3"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(figures["reads_per_s"]) == {"1", "16"}
    assert all(rate > 0 for rate in figures["reads_per_s"].values())
    for bad, named in ((["--file", str(tmp_path / "none")], "is not a file"),
                       (["--file", str(path), "--depths", "4,x"], "--depths")):  # fmt: skip
        run = subprocess.run([*probe, *bad], capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and named in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_whole_benchmark_runs_small_and_reports_every_ratio(tmp_path, bench_files) -> None:
    out = tmp_path / "out"
    cmd = [
        sys.executable, str(REPO / "benchmark/bench_serving_tiers.py"), *bench_files, "--out", str(out),
        "--configs", "dram,ssd-1/16,ssd-1/16-seeded", "--concurrencies", "2", "--repeats", "2",
        "--num-prompts", "1", "--input-len", "48", "--output-len", "4", "--replay",
        "--disk-probe-s", "0.5",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    # two interleaved repeats, each a ratio of two runs back to back; the median reported
    ratios = summary["ssd_over_dram_throughput_per_repeat"]["2"]
    assert len(ratios) == 2 and all(r > 0 for r in ratios)
    assert summary["ssd_over_dram_throughput"]["2"] == pytest.approx(
        float(np.median(ratios)), abs=1e-3
    )
    assert len(summary["runs"]["ssd-1/16"]["2"]) == 2
    assert summary["runs"]["ssd-1/16"]["2"][0]["completed"] == 4  # max(4, 1 x 2) prompts
    # the ssd server read rows from its files with direct I/O, the page cache out of play
    assert summary["configs"]["ssd-1/16"]["2"]["disk_rows_s"] > 0
    # each server's own processes were found and their CPU time counted
    assert all(
        summary["configs"][n]["2"]["server_cpu_ms_per_token"] > 0 for n in summary["configs"]
    )
    assert summary["page_cache_resident"]["after"] < 0.01
    disk = summary["disk_random_4k_reads_per_s"]
    assert disk["before"] > 0 and disk["after"] > 0
    assert "the disk's random 4 KiB reads/s at depth 512" in proc.stdout
    assert summary["ssd_outputs_equal_dram"] == {"ssd-1/16": 1.0, "ssd-1/16-seeded": 1.0}
    assert 0 <= summary["read_ahead_exposed_ratio"] <= 1
    assert Path(summary["png"]).stat().st_size > 10_000
    assert "ssd_over_dram_throughput: c=2: " in proc.stdout
    # the seeded config: its profile made over the train split, its ratios and hit ratios
    assert Path(bench_files[bench_files.index("--profile") + 1]).is_file()
    assert f"profiling {bench_text('train').describe()} -> " in proc.stdout
    assert summary["seeding"]["ssd-1/16-seeded"]["rows"] > 0
    for key in ("seeded_ssd_over_dram_throughput", "seeded_ssd_over_dram_p90_tpot"):
        assert len(summary[key + "_per_repeat"]["2"]) == 2 and summary[key]["2"] > 0
    hit = summary["first_pass_ram_hit_ratio"]
    assert set(hit) == {"ssd-1/16", "ssd-1/16-seeded"}
    for name, ratios in hit.items():
        probed = ratios["rows_probed"]
        assert probed["prefill"] > 0 and probed["decode"] > 0, (name, ratios)
        assert all(0 <= ratios[k] <= 1 for k in ("all", "prefill", "decode")), (name, ratios)
    # seeded from text like the prompts', the read-ahead finds more of a prompt's rows
    assert hit["ssd-1/16-seeded"]["prefill"] > hit["ssd-1/16"]["prefill"]
    curves = {
        key: [p["hit_ratio"] for p in summary[key]["points"]]
        for key in ("cache_curve", "cache_curve_seeded", "cache_curve_seeded_no_admission")
    }
    assert len({len(c) for c in curves.values()}) == 1
    # the seeded rows kept (misses not admitted): the smallest cache hits more than an
    # empty LRU cache over the same stream (the seeded LRU cache is measured, not bounded)
    assert curves["cache_curve_seeded_no_admission"][0] > curves["cache_curve"][0]
    # --replay: each run's prompts again; the ssd server finds their rows in its RAM cache
    assert len(summary["replayed_ssd_over_dram_throughput_per_repeat"]["2"]) == 2
    for first, again in zip(
        summary["runs"]["ssd-1/16"]["2"], summary["replays"]["ssd-1/16"]["2"], strict=True
    ):
        assert again["completed"] == first["completed"]
        # NOTE: >=: a first pass's rows that read-ahead brought into the cache before the
        # lookup came count as hits too (only lookups' probes count), which can reach 1.0
        assert again["ram_cache_hit_ratio"] >= max(0.8, first["ram_cache_hit_ratio"])


@pytest.mark.slow
def test_bench_seed_start_times_seeded_and_unseeded_starts(tmp_path, bench_files) -> None:
    """``benchmark/bench_seed_start.py`` once, small: one start of each after the untimed
    one; what it reports, not how fast."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmark/bench_seed_start.py"), *bench_files,
         "--repeats", "1", "--burst", "2", "--input-len", "48", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary == json.loads((out / "summary.json").read_text())
    (plain,), (seeded,) = summary["starts"]["ssd-1/16"], summary["starts"]["ssd-1/16-seeded"]
    for start in (plain, seeded):
        assert 0 < start["ready_s"] < start["first_tokens_s"]
        assert start["burst_s"] == pytest.approx(
            start["first_tokens_s"] - start["ready_s"], abs=0.02
        )
    assert seeded["rows_seeded"] > 0 and seeded["seeded_after_s"] >= seeded["first_tokens_s"]
    assert summary["seeded_over_unseeded"]["first_tokens_s"] == pytest.approx(
        seeded["first_tokens_s"] / plain["first_tokens_s"], abs=1e-3
    )
    assert "seeded / unseeded first_tokens_s: median" in done.stdout


def test_bench_seed_start_refuses_bad_counts_in_one_line(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmark/bench_seed_start.py"), "--burst", "0"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert (
        done.returncode == 2 and done.stdout.strip() == "error: --burst must be at least 1, not 0"
    )
