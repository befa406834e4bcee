"""``python -m engram.profile merge``: profiles of one hash summed row by row, ranked and
cut again; a profile of another hash refused in one line; ``MODEL CORPUS`` still profiles."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
from engram_testing.profile_cli import run_profile

from engram.model.directory import read_config
from engram.profile import HashIdentity, RowProfile, load_tokenizer, merge_profiles, model_hasher
from engram.profile.ranking import top_rows

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "engram" / "assets" / "tiny-engram"


@pytest.fixture(scope="module")
def identity() -> HashIdentity:
    hasher = model_hasher(read_config(TINY), load_tokenizer(TINY), str(TINY))
    return HashIdentity.of(hasher)


def _random_profile(identity: HashIdentity, rng: np.random.Generator, top: int) -> RowProfile:
    """Up to ``top`` distinct random rows per layer, Zipf-like random counts, ranked."""
    rows, counts = {}, {}
    for table in identity.tables:
        ids = rng.choice(table.num_rows, size=int(rng.integers(1, top + 1)), replace=False)
        hits = rng.zipf(1.5, size=ids.size).clip(max=10**6)
        rows[table.layer], counts[table.layer] = top_rows(ids, hits, top)
    corpus = {"served_rows": int(rng.integers(1, 10**6)), "dropped_counts": 0}
    return RowProfile(identity, top, rows, counts, corpus)


def _dense(profiles: list[RowProfile], layer: int, num_rows: int) -> np.ndarray:
    total = np.zeros(num_rows, dtype=np.int64)
    for profile in profiles:
        np.add.at(total, profile.rows[layer], profile.counts[layer])
    return total


def test_merge_sums_counts_row_by_row(identity, tmp_path) -> None:
    rng = np.random.default_rng()
    profiles = [_random_profile(identity, rng, int(rng.integers(50, 400))) for _ in range(3)]
    paths = []
    for i, profile in enumerate(profiles):
        paths.append(tmp_path / f"p{i}.npz")
        profile.save(paths[-1])
    out = tmp_path / "out" / "merged.npz"
    done = run_profile("merge", *map(str, paths), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("merged 3 profiles: layer 1 ")
    merged = RowProfile.load(out)
    assert merged.identity == identity
    assert merged.top == max(p.top for p in profiles)  # the default
    assert merged.corpus["served_rows"] == sum(p.corpus["served_rows"] for p in profiles)
    for table in identity.tables:
        dense = _dense(profiles, table.layer, table.num_rows)
        want = top_rows(np.flatnonzero(dense), dense[dense > 0], merged.top)
        assert np.array_equal(merged.rows[table.layer], want[0])
        assert np.array_equal(merged.counts[table.layer], want[1])
    # --top cuts the same ranking
    cut = merge_profiles(paths, top=17)
    for layer in identity.layers:
        assert np.array_equal(cut.rows[layer], merged.rows[layer][:17])
        assert np.array_equal(cut.counts[layer], merged.counts[layer][:17])


def test_ties_rank_by_row_id_also_at_the_cut() -> None:
    rows = np.array(random.sample(range(1000), 200), dtype=np.int64)
    counts = np.array([random.choice([1, 2, 3]) for _ in rows], dtype=np.int64)
    top = random.randint(1, 199)
    got_rows, got_counts = top_rows(rows, counts, top)
    order = sorted(zip(rows.tolist(), counts.tolist(), strict=True), key=lambda rc: (-rc[1], rc[0]))
    assert list(zip(got_rows.tolist(), got_counts.tolist(), strict=True)) == order[:top]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"token_map_digest": "0" * 16}, "it was made with another tokenizer"),
        ({"max_ngram_size": 5}, "its n-gram size is 5"),
        ({"hash": "ple"}, "it was counted through the PLE hash (Qwen3.8-Flash-Next), {a} hashes"),
    ],
)
def test_a_profile_of_another_hash_is_refused_in_one_line(identity, tmp_path, change, message):
    rng = np.random.default_rng()
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    _random_profile(identity, rng, 100).save(a)
    other = _random_profile(identity, rng, 100)
    dataclasses.replace(other, identity=dataclasses.replace(identity, **change)).save(b)
    out = tmp_path / "c.npz"
    done = run_profile("merge", str(a), str(b), "--out", str(out))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {b} cannot be merged with {a}: ")
    assert message.format(a=a) in lines[0]
    assert "Traceback" not in done.stderr
    assert not out.exists()


def test_merge_usage_errors_are_one_line(tmp_path) -> None:
    for args, message in [
        (["merge", str(tmp_path / "none.npz"), "--out", str(tmp_path / "c.npz")], "does not exist"),
        (["merge", "--out", str(tmp_path / "c.npz")], "the following arguments are required"),
    ]:
        done = run_profile(*args)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], done.stderr
    text = tmp_path / "t.npz"
    text.write_text("no profile")
    done = run_profile("merge", str(text), "--out", str(tmp_path / "c.npz"))
    assert done.returncode == 2 and "is not an Engram row profile" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_help_names_both_forms() -> None:
    done = run_profile("--help")
    assert done.returncode == 0
    assert "python -m engram.profile merge A.npz B.npz ... --out C.npz" in " ".join(
        done.stdout.split()
    )
    merge_help = run_profile("merge", "--help")
    assert merge_help.returncode == 0 and "Sum the row counts of profiles" in merge_help.stdout
