"""``python -m engram.profile``: a corpus's row counts through the model's own hash, the
top rows of each table, the file, and what it refuses."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from engram_testing.profile_cli import run_profile

from engram.errors import EngramInputError
from engram.hashing import NgramHasher
from engram.model.directory import read_config
from engram.profile import (
    HashIdentity,
    RowProfile,
    counting,
    layer_rows,
    load_tokenizer,
    make,
    make_profile,
    model_hasher,
    read_header,
)
from engram.profile.corpus import corpus_files
from engram.spec import EngramSpec

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "engram" / "assets" / "tiny-engram"


def _words(rng: random.Random, n: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz_"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(1, 9))) for _ in range(n)]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Text files of Zipf-drawn random words (and files the walk must skip)."""
    rng = random.Random()
    words = _words(rng, 400)
    weights = [1 / (i + 1) for i in range(len(words))]
    root = tmp_path / "corpus"
    for name in ("a.txt", "b.py", "sub/c.md", "sub/deeper/d.rst", "e.txt"):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            " ".join(rng.choices(words, weights, k=rng.randint(3, 14)))
            for _ in range(rng.randint(200, 600))
        ]
        path.write_text("\n".join(lines))
    (root / "skipped.bin").write_bytes(bytes(rng.randrange(256) for _ in range(4000)))
    (root / ".hidden").mkdir()
    (root / ".hidden" / "f.txt").write_text(" ".join(words))
    return root


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY)


@pytest.fixture(scope="module")
def hasher(tokenizer) -> NgramHasher:
    return model_hasher(read_config(TINY), tokenizer, str(TINY))


def _direct_counts(hasher: NgramHasher, tokenizer, files: list[Path]) -> list[np.ndarray]:
    """Each table's hits, one file at a time through ``NgramHasher.hash``."""
    counts = [np.zeros(n, dtype=np.int64) for n in hasher.spec.num_embeddings]
    for path in files:
        ids = tokenizer.encode(path.read_text(), add_special_tokens=False).ids
        rows = hasher.hash(torch.tensor(ids))
        for i in range(len(counts)):
            counts[i] += np.bincount(rows[:, i].reshape(-1).numpy(), minlength=counts[i].size)
    return counts


def test_corpus_walk_takes_text_files_only(corpus: Path) -> None:
    files = corpus_files([corpus])
    names = sorted(p.relative_to(corpus).as_posix() for p in files)
    assert names == ["a.txt", "b.py", "e.txt", "sub/c.md", "sub/deeper/d.rst"]
    assert corpus_files([corpus / "skipped.bin"]) == [corpus / "skipped.bin"]  # named: read
    with pytest.raises(EngramInputError, match="does not exist"):
        corpus_files([corpus / "nope"])
    binary = corpus.parent / "binary"
    binary.mkdir()
    (binary / "x.bin").write_bytes(b"\x00\x01")
    with pytest.raises(EngramInputError, match="holds no text file"):
        corpus_files([binary])


def test_counts_equal_a_direct_count_ranked(corpus, tokenizer, hasher, monkeypatch) -> None:
    # NOTE: small batches and groups, so documents straddle hash batches and tokeniser calls
    monkeypatch.setattr(counting, "HASH_TOKENS", 997)
    monkeypatch.setattr(make, "GROUP_CHARS", 5000)
    files = corpus_files([corpus])
    profile = make_profile(hasher, tokenizer, files, top=10**9, show_progress=False)
    direct = _direct_counts(hasher, tokenizer, files)
    assert profile.corpus["files"] == 5 and profile.corpus["tokens"] > 5000
    for i, layer in enumerate(hasher.spec.layer_ids):
        rows, counts = profile.rows[layer], profile.counts[layer]
        hit = np.flatnonzero(direct[i])
        assert np.array_equal(np.sort(rows), hit)  # every row looked up, no other
        assert np.array_equal(counts, direct[i][rows])
        assert counts.sum() == profile.corpus["tokens"] * hasher.spec.n_cols
        # the most looked-up first, ties by row id
        assert np.all(
            (counts[:-1] > counts[1:]) | ((counts[:-1] == counts[1:]) & (rows[:-1] < rows[1:]))
        )
        assert counts[0] > counts[-1]


def test_top_keeps_the_most_looked_up_rows(corpus, tokenizer, hasher) -> None:
    files = corpus_files([corpus])
    full = make_profile(hasher, tokenizer, files, top=10**9, show_progress=False)
    top = make_profile(hasher, tokenizer, files, top=37, show_progress=False)
    for layer in hasher.spec.layer_ids:
        assert top.rows[layer].size == 37
        assert np.array_equal(top.rows[layer], full.rows[layer][:37])
        assert np.array_equal(top.counts[layer], full.counts[layer][:37])


def test_file_round_trip_and_one_tables_rows(corpus, tokenizer, hasher, tmp_path) -> None:
    profile = make_profile(hasher, tokenizer, corpus_files([corpus]), top=500, show_progress=False)
    path = tmp_path / "p.npz"
    profile.save(path)
    back = RowProfile.load(path)
    assert back.identity == profile.identity == HashIdentity.of(hasher)
    assert (back.top, back.corpus) == (500, profile.corpus)
    for layer in hasher.spec.layer_ids:
        assert np.array_equal(back.rows[layer], profile.rows[layer])
        assert np.array_equal(back.counts[layer], profile.counts[layer])
        assert np.array_equal(layer_rows(path, layer), profile.rows[layer])
    with pytest.raises(EngramInputError, match=r"no table for layer 2 \(it profiles layers 1, 3\)"):
        layer_rows(path, 2)


def _rewrite_header(path: Path, **changes) -> None:
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    header = json.loads(arrays["header"].tobytes()) | changes
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(path, **arrays)


def test_other_versions_formats_and_files_are_refused(corpus, tokenizer, hasher, tmp_path):
    path = tmp_path / "p.npz"
    make_profile(hasher, tokenizer, corpus_files([corpus]), top=50, show_progress=False).save(path)
    _rewrite_header(path, version=2)
    with pytest.raises(EngramInputError, match="version-2 row profile; this build reads version 1"):
        read_header(path)
    _rewrite_header(path, version=1, format="something-else")
    with pytest.raises(
        EngramInputError, match="not an Engram row profile .format 'something-else'"
    ):
        read_header(path)
    _rewrite_header(path, format="engram-row-profile")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files if k != "counts_3"}
    np.savez(path, **arrays)
    with pytest.raises(
        EngramInputError, match="damaged: its header names layer 3, it has no counts_3"
    ):
        RowProfile.load(path)
    text = tmp_path / "t.npz"
    text.write_text("hello")
    with pytest.raises(EngramInputError, match="is not an Engram row profile"):
        read_header(text)
    with pytest.raises(EngramInputError, match="does not exist"):
        read_header(tmp_path / "missing.npz")


def test_a_profile_of_another_model_or_tokenizer_is_told_apart(hasher) -> None:
    mine = HashIdentity.of(hasher)
    assert mine.mismatch(HashIdentity.of(hasher)) is None
    config = read_config(TINY)
    token_map = hasher.token_map.clone()
    a, b = random.sample(range(3, token_map.numel()), 2)
    token_map[[a, b]] = token_map[[b, a]]
    if torch.equal(token_map, hasher.token_map):  # NOTE: two tokens of one compressed id
        token_map[a] = (token_map[a] + 1) % hasher.compressed_vocab_size
    other_tokens = HashIdentity.of(NgramHasher(hasher.spec, token_map))
    assert "another tokenizer" in mine.mismatch(other_tokens)
    moved = dict(config, engram_layer_ids=[0, 2])
    other_layers = HashIdentity.of(NgramHasher(EngramSpec.from_hf_config(moved), hasher.token_map))
    assert mine.mismatch(other_layers) == (
        "it profiles layers 1, 3, this model's Engram layers are 0, 2"
    )
    from engram.primes import prime_layout

    vocab = config["engram_vocab_size"] + 977
    sums = [sum(p for o in layer for p in o) for layer in prime_layout(2, 4, 4, vocab)]
    bigger = dict(config, engram_vocab_size=vocab, engram_num_embeddings=sums)
    other_rows = HashIdentity.of(NgramHasher(EngramSpec.from_hf_config(bigger), hasher.token_map))
    assert mine.mismatch(other_rows).startswith(
        f"it profiles layer 1's table of {config['engram_num_embeddings'][0]:,} rows, "
        f"this model's has {sums[0]:,}"
    )


def test_cli_writes_a_profile_with_progress(corpus, tmp_path, hasher) -> None:
    out = tmp_path / "out" / "p.npz"
    done = run_profile(str(TINY), str(corpus), "--out", str(out), "--top", "100")
    assert done.returncode == 0, done.stderr
    assert "profile: 100%" in done.stderr  # progress, a plain line off a terminal
    assert "profiled 5 files" in done.stderr
    profile = RowProfile.load(out)
    assert profile.identity == HashIdentity.of(hasher)
    assert all(profile.rows[layer].size == 100 for layer in hasher.spec.layer_ids)


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tiny}", "{tmp}/nope", "--out", "{tmp}/p.npz"], "corpus path {tmp}/nope does not exist"),
        (["{tmp}/no-model", "{corpus}", "--out", "{tmp}/p.npz"], "model directory {tmp}/no-model"),
        (["{tiny}", "{corpus}", "--out", "{tmp}/p.npz", "--top", "0"], "must be a whole number"),
        (["{tiny}", "{corpus}", "--out", "{tmp}"], "is a directory; give a file name"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(corpus, tmp_path, args, message) -> None:
    fill = {"tiny": str(TINY), "tmp": str(tmp_path), "corpus": str(corpus)}
    done = run_profile(*(a.format(**fill) for a in args))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert message.format(**fill) in lines[0]
    assert not (tmp_path / "p.npz").exists()
