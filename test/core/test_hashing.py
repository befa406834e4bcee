"""NgramHasher against upstream's compute_engram_hash_ids, chunking and batching."""

from __future__ import annotations

import random

import pytest
import torch
from engram_testing.plain import next_histories

from engram import EngramConfigError, EngramInputError, EngramSpec, NgramHasher
from test.core.test_spec import DSV41, random_config
from test.core.upstream import upstream_engram


def random_hasher(rng: random.Random, image_token_id: int | None = None) -> NgramHasher:
    cfg = random_config(rng)
    spec = EngramSpec.from_hf_config(cfg)
    vocab = rng.randint(spec.compressed_vocab_size, spec.compressed_vocab_size * 3)
    token_map = torch.randint(0, spec.compressed_vocab_size, (vocab,))
    token_map[: spec.compressed_vocab_size] = torch.randperm(spec.compressed_vocab_size)
    return NgramHasher(spec, token_map, rng.randrange(vocab), image_token_id=image_token_id)


def reference_windows(tokens: list[int], history: list[int], n: int, image: int | None):
    """Plain-Python windows: column s is the token s back, blocked at the start or
    at/behind an image token."""
    seq = history + tokens
    rows, blocked = [], []
    for p in range(len(history), len(seq)):
        row, blk, stop = [], [], False
        for s in range(n):
            q = p - s
            stop = stop or q < 0 or seq[q] == image
            row.append(0 if stop else seq[q])
            blk.append(stop)
        rows.append(row)
        blocked.append(blk)
    return torch.tensor(rows, dtype=torch.int64), torch.tensor(blocked)


def upstream_hash(h: NgramHasher, tokens: list[int], history: list[int]) -> torch.Tensor:
    win, blocked = reference_windows(tokens, history, h.window, h.image_token_id)
    return upstream_engram().compute_engram_hash_ids(
        win, blocked, h.pad_compressed, h.token_map, h.multipliers, h.primes, h.offsets
    )


@pytest.mark.parametrize("trial", range(6))
def test_hash_matches_upstream_on_random_streams(trial: int) -> None:
    rng = random.Random()
    h = random_hasher(rng)
    tokens = [rng.randrange(h.vocab_size) for _ in range(rng.randint(1, 300))]
    ours = h.hash(torch.tensor(tokens))
    assert ours.shape == (len(tokens), h.spec.n_layers, h.spec.n_cols)
    assert torch.equal(ours, upstream_hash(h, tokens, []))
    hist = [rng.randrange(h.vocab_size) for _ in range(rng.randint(0, h.window - 1))]
    assert torch.equal(
        h.hash(torch.tensor(tokens), torch.tensor(hist)), upstream_hash(h, tokens, hist)
    )


def test_dsv41_hash_matches_upstream() -> None:
    spec = EngramSpec.from_hf_config(DSV41)
    token_map = torch.randint(0, 99_092, (129_280,))
    token_map[:99_092] = torch.randperm(99_092)
    h = NgramHasher(spec, token_map)
    tokens = torch.randint(0, 129_280, (2048,)).tolist()
    ours = h.hash(torch.tensor(tokens))
    assert torch.equal(ours, upstream_hash(h, tokens, []))
    for layer in range(2):
        assert int(ours[:, layer].max()) < spec.num_embeddings[layer]


def test_every_chunk_split_equals_whole() -> None:
    rng = random.Random()
    h = random_hasher(rng)
    tokens = torch.randint(0, h.vocab_size, (rng.randint(12, 24),))
    whole = h.hash(tokens)
    for cut in range(1, tokens.numel()):
        first = h.hash(tokens[:cut])
        second = h.hash(tokens[cut:], tokens[:cut])
        assert torch.equal(torch.cat([first, second]), whole), cut
    # many small chunks, carrying the history the way a server does
    hist = torch.full((1, h.window - 1), -1)
    parts, pos = [], 0
    while pos < tokens.numel():
        step = rng.randint(1, 3)
        chunk = tokens[pos : pos + step]
        lens = torch.tensor([chunk.numel()])
        parts.append(h.hash_batch(chunk, lens, hist))
        hist = next_histories(h.window, chunk, lens, hist)
        pos += step
    assert torch.equal(torch.cat(parts), whole)


def test_ragged_batch_equals_per_request() -> None:
    rng = random.Random()
    h = random_hasher(rng)
    lens = [rng.randint(0, 40) for _ in range(rng.randint(1, 6))]
    seqs = [torch.randint(0, h.vocab_size, (n,)) for n in lens]
    hists = [torch.randint(0, h.vocab_size, (rng.randint(0, h.window - 1),)) for _ in lens]
    batch = h.hash_batch(
        torch.cat(seqs), torch.tensor(lens), torch.stack([h.history_row(x) for x in hists])
    )
    expected = torch.cat([h.hash(s, x) for s, x in zip(seqs, hists, strict=True)])
    assert torch.equal(batch, expected)


def test_image_tokens_block_cumulatively() -> None:
    rng = random.Random()
    image = 7
    h = random_hasher(rng, image_token_id=image)
    tokens = torch.randint(0, h.vocab_size, (60,))
    tokens[torch.randint(0, 60, (6,))] = image
    tokens = tokens.tolist()
    assert torch.equal(h.hash(torch.tensor(tokens)), upstream_hash(h, tokens, []))
    # the token right after an image token hashes its longer n-grams with pads only
    win = h.windows(torch.tensor(tokens), torch.tensor([60]), h.history_row(None)[None])
    after = [i + 1 for i, t in enumerate(tokens[:-1]) if t == image and tokens[i + 1] != image]
    for p in after:
        assert (win[p, 1:] == -1).all() and win[p, 0] == tokens[p]


def test_bad_inputs_are_named() -> None:
    h = random_hasher(random.Random())
    with pytest.raises(EngramInputError, match=f"token id {h.vocab_size} is out of range"):
        h.hash(torch.tensor([0, h.vocab_size]))
    with pytest.raises(EngramInputError, match="token id -3 is out of range"):
        h.hash(torch.tensor([1, -3]))
    with pytest.raises(EngramInputError, match="histories must be"):
        h.hash_batch(torch.tensor([1, 2]), torch.tensor([2]), torch.zeros(1, h.window + 2))
    with pytest.raises(EngramInputError, match="seq_lens sum to 3 but there are 2 tokens"):
        h.hash_batch(torch.tensor([1, 2]), torch.tensor([3]), torch.full((1, h.window - 1), -1))


def test_compressed_vocab_mismatch_is_a_hard_error() -> None:
    spec = EngramSpec.from_hf_config(DSV41)
    token_map = torch.randint(0, 99_000, (129_280,))
    token_map[:99_000] = torch.arange(99_000)
    with pytest.raises(
        EngramConfigError, match="99,000 compressed ids but engram_compressed_vocab_size is 99,092"
    ):
        NgramHasher(spec, token_map)
