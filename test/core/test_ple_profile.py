"""``python -m engram.profile`` of a Qwen3.8-Flash-Next (``qwen4_exp``) checkpoint: the PLE
hash with the checkpoint's constants (computed as upstream computes them where the
checkpoint has none), counted as the prompts' own rows, and its identity.

Upstream SGLang's ``Qwen4ExpNGramEmbedding`` is the oracle of the hash itself and of the
computed constants (``test/plugin/test_qwen4_hash.py``)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from engram_testing.profile_cli import run_profile
from engram_testing.qwen4_tiny_checkpoint import WEIGHTS_FILE, write_tiny_checkpoint
from safetensors.torch import load_file, save_file

from engram.model.directory import read_config
from engram.profile import RowProfile, counting, load_tokenizer, make, make_profile, profile_hash
from engram.profile.corpus import corpus_files
from engram.profile.ple_model import BUFFER, upstream_multipliers
from engram.ssd.checkpoint_formats.ple_config import PleConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("qwen4") / "tiny"
    return write_tiny_checkpoint(out, seed=random.randrange(1 << 30))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Files of random words, the EOS token among them (the PLE windows restart there)."""
    rng = random.Random()
    words = ["".join(rng.choices("abcdefghijklmnop_", k=rng.randint(1, 8))) for _ in range(300)]
    words += ["<|eos|>"] * 10
    root = tmp_path / "corpus"
    root.mkdir()
    for i in range(4):
        lines = [" ".join(rng.choices(words, k=rng.randint(2, 12))) for _ in range(300)]
        (root / f"{i}.txt").write_text("\n".join(lines))
    return root


def test_counts_are_the_prompts_own_rows(checkpoint, corpus, monkeypatch) -> None:
    # NOTE: small batches and groups, so documents straddle hash batches and tokeniser calls
    monkeypatch.setattr(counting, "HASH_TOKENS", 997)
    monkeypatch.setattr(make, "GROUP_CHARS", 5000)
    tokenizer = load_tokenizer(checkpoint)
    hasher, identity = profile_hash(checkpoint, read_config(checkpoint), tokenizer)
    files = corpus_files([corpus])
    profile = make_profile(
        hasher, tokenizer, files, top=10**9, show_progress=False, identity=identity
    )
    ple = PleConfig.from_config(read_config(checkpoint))
    assert identity.hash == "ple" and identity.layers == ple.layer_ids
    assert [t.num_rows for t in identity.tables] == [ple.num_rows(i) for i in ple.layer_ids]
    direct = [np.zeros(t.num_rows, dtype=np.int64) for t in identity.tables]
    for path in files:
        ids = tokenizer.encode(path.read_text(), add_special_tokens=False).ids
        rows = hasher.prompt_rows(ids)
        for i in range(len(direct)):
            direct[i] += np.bincount(rows[:, i].reshape(-1).numpy(), minlength=direct[i].size)
    for i, layer in enumerate(identity.layers):
        hit = np.flatnonzero(direct[i])
        assert np.array_equal(np.sort(profile.rows[layer]), hit)
        assert np.array_equal(profile.counts[layer], direct[i][profile.rows[layer]])
        assert profile.counts[layer].sum() == profile.corpus["tokens"] * ple.ngram_heads
    assert any(1 in tokenizer.encode(f.read_text()).ids for f in files)  # EOS inside


def test_cli_profiles_the_checkpoint(checkpoint, corpus, tmp_path) -> None:
    out = tmp_path / "p.npz"
    done = run_profile(str(checkpoint), str(corpus), "--out", str(out))
    assert done.returncode == 0, done.stderr
    profile = RowProfile.load(out)
    _, identity = profile_hash(checkpoint, read_config(checkpoint), load_tokenizer(checkpoint))
    assert profile.identity == identity
    assert "profiled 4 files" in done.stderr


def test_constants_missing_from_the_checkpoint_are_computed_as_upstream(checkpoint, tmp_path):
    """The tiny checkpoint's multipliers are random draws; without them the hash takes
    upstream's SplitMix64 ones (the config's seed, the layer's index), and a profile of
    one does not fit the other."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in checkpoint.iterdir():
        if path.name != WEIGHTS_FILE:
            (bare / path.name).write_bytes(path.read_bytes())
    tensors = load_file(checkpoint / WEIGHTS_FILE)
    save_file(
        {k: v for k, v in tensors.items() if not BUFFER.match(k)},
        bare / WEIGHTS_FILE,
        metadata={"format": "pt"},
    )
    config = json.loads((checkpoint / "config.json").read_text())
    tokenizer = load_tokenizer(checkpoint)
    loaded, with_buffers = profile_hash(checkpoint, config, tokenizer)
    computed, without = profile_hash(bare, config, tokenizer)
    ple = PleConfig.from_config(config)
    text = config["text_config"]
    for index, (mine, theirs) in enumerate(zip(loaded.layers, computed.layers, strict=True)):
        name = f"model.language_model.layers.{mine.layer_id}.ple.ple_embedding."
        assert torch.equal(mine.multipliers, tensors[name + "layer_multipliers"])
        assert torch.equal(
            theirs.multipliers,
            upstream_multipliers(ple.ngram_size, text["vocab_size"], 1234, index),
        )
        # the tiny checkpoint's bucket sizes are the config's primes
        assert torch.equal(theirs.vocab_sizes, mine.vocab_sizes)
        assert torch.equal(theirs.offsets, mine.offsets)
    assert "hashes layer 1 with other constants" in without.mismatch(with_buffers)
