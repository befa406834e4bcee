"""The benchmarks' text (``engram_testing.bench_text``): the pinned package's files as
listed, each checked, two disjoint splits, enough held-out prompts for the benchmarks'
defaults, and a request for more than there is refused in one line naming how much there
is."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from engram_testing import bench_text as bt
from engram_testing.tiers.workload import SLACK_TOKENS, heldout_ids

from engram.errors import EngramInputError, EngramRunError
from engram.model.builder import TRAINED_MODEL

# NOTE: bench_serving_tiers.py's default: 3 repeats x (4 + 24 + 96) prompts of 256 tokens
DEFAULT_TIERS_PROMPTS, DEFAULT_INPUT_LEN = 3 * (4 + 3 * 8 + 3 * 32), 256


def test_the_splits_are_the_listed_files_of_the_installed_package_disjoint() -> None:
    train, heldout = bt.bench_text("train"), bt.bench_text("heldout")
    assert train.root == heldout.root and train.root.name == bt.PACKAGE
    assert not set(train.files) & set(heldout.files)
    outside_models = {
        p for p in train.root.rglob("*.py") if p.relative_to(train.root).parts[0] != "models"
    }
    assert set(train.files) | set(heldout.files) == outside_models
    assert 20 < len(heldout.files) < len(train.files)
    assert train.sha256 != heldout.sha256 and len(train.sha256) == 64
    line = heldout.describe()
    assert str(heldout.root) in line and heldout.sha256 in line and "5.19.0" in line


def test_the_held_out_text_is_enough_for_every_default_and_more_is_refused() -> None:
    pieces = heldout_ids(TRAINED_MODEL, DEFAULT_INPUT_LEN + SLACK_TOKENS)
    assert len(pieces) > 2 * DEFAULT_TIERS_PROMPTS
    assert all(len(p) == DEFAULT_INPUT_LEN + SLACK_TOKENS for p in pieces)
    count = random.randint(1, len(pieces))
    assert heldout_ids(TRAINED_MODEL, DEFAULT_INPUT_LEN + SLACK_TOKENS, count) == pieces[:count]
    with pytest.raises(EngramInputError) as err:
        heldout_ids(TRAINED_MODEL, DEFAULT_INPUT_LEN + SLACK_TOKENS, len(pieces) + 1)
    message = str(err.value)
    assert f"gives {len(pieces):,} prompts of 304 tokens; {len(pieces) + 1:,} are needed" in message
    assert "\n" not in message


def test_a_file_unlike_the_listed_one_is_named(monkeypatch, tmp_path: Path) -> None:
    lines = bt.FILE_LIST.read_text().splitlines()
    at = random.choice([i for i, line in enumerate(lines) if line.startswith("heldout\t")])
    split, sha, name = lines[at].split("\t")
    lines[at] = "\t".join((split, sha[::-1], name))
    listed = tmp_path / "list.tsv"
    listed.write_text("\n".join(lines))
    monkeypatch.setattr(bt, "FILE_LIST", listed)
    bt.bench_text.cache_clear()
    try:
        with pytest.raises(EngramRunError, match=f"benchmark text .*{name} is not transformers"):
            bt.bench_text("heldout")
    finally:
        bt.bench_text.cache_clear()
