"""hash_ids is bit-identical to engram.NgramHasher: ragged extend, decode, chunking."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from engram_kernels import HashTables, hash_ids

from engram import EngramSpec, NgramHasher
from engram.errors import EngramInputError

VOCAB = 20_000


def random_hasher(image: bool = False) -> NgramHasher:
    """A hasher with a random layout; large compressed vocabularies give DSv4-sized
    multipliers, so the int64 products use their full range."""
    compressed = random.choice([1_000, 99_092])
    spec = EngramSpec(
        layer_ids=tuple(random.sample(range(40), random.randint(1, 3))),
        num_embeddings=(),
        max_ngram_size=random.randint(2, 5),
        vocab_size=random.choice([5_000, 16_000_000]),
        n_heads=random.randint(1, 8),
        head_dim=64,
        compressed_vocab_size=compressed,
    )
    spec = dataclasses.replace(spec, num_embeddings=spec.prime_sums)
    token_map = torch.randint(0, compressed, (VOCAB,))
    token_map[random.randrange(VOCAB)] = compressed - 1
    image_id = random.randrange(VOCAB) if image else None
    return NgramHasher(spec, token_map, image_token_id=image_id)


def random_histories(b: int, n1: int) -> torch.Tensor:
    """Histories [b, n1]: full, partly empty (-1 on the left) or empty."""
    hist = torch.randint(0, VOCAB, (b, n1))
    for row in hist:
        row[: random.randint(0, n1)] = -1
    return hist


def poisoned_ids(tokens: int, tables: HashTables, device: torch.device) -> torch.Tensor:
    """An output buffer of a value the kernel never writes (ids are >= 0, padding -1)."""
    shape = (tokens, tables.n_layers, tables.n_cols)
    return torch.full(shape, -7, dtype=torch.long, device=device)


def offsets(lens: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)])


@pytest.mark.parametrize("image", [False, True])
def test_extend_batch_with_padding(device: torch.device, image: bool) -> None:
    hasher = random_hasher(image)
    tables = HashTables.from_hasher(hasher, device)
    lens = torch.randint(0, 40, (random.randint(1, 6),))
    total = int(lens.sum())
    tokens = torch.randint(0, VOCAB, (total + random.randint(0, 9),))  # padded tail
    if image:
        tokens[torch.rand(tokens.numel()) < 0.1] = hasher.image_token_id
    hist = random_histories(lens.numel(), hasher.window - 1)
    if image:
        hist[0, -1] = hasher.image_token_id
    expected = hasher.hash_batch(tokens[:total], lens, hist)
    got_hist = hist.clone().to(device)
    out = poisoned_ids(tokens.numel(), tables, device)
    got = hash_ids(tables, tokens.to(device), got_hist, starts=offsets(lens).to(device), out=out)
    got = got.cpu()
    assert torch.equal(got[:total], expected)
    assert bool((got[total:] == -1).all())
    assert torch.equal(got_hist.cpu(), hasher.next_histories(tokens[:total], lens, hist))


def test_chunks_hash_like_one_pass(device: torch.device) -> None:
    hasher = random_hasher()
    tables = HashTables.from_hasher(hasher, device)
    seqs = [torch.randint(0, VOCAB, (random.randint(1, 60),)) for _ in range(3)]
    whole = [hasher.hash(s) for s in seqs]
    # Pool of history rows; request i lives in a random slot.
    pool = torch.full((8, hasher.window - 1), -1, dtype=torch.long, device=device)
    slots = torch.randperm(8)[:3].to(device)
    done = [0, 0, 0]
    pieces: list[list[torch.Tensor]] = [[], [], []]
    while any(d < s.numel() for d, s in zip(done, seqs, strict=True)):
        chunk = [min(s.numel() - d, random.randint(0, 9)) for d, s in zip(done, seqs, strict=True)]
        tokens = torch.cat([s[d : d + c] for s, d, c in zip(seqs, done, chunk, strict=True)])
        starts = offsets(torch.tensor(chunk))
        out = hash_ids(tables, tokens.to(device), pool, starts=starts.to(device), slots=slots)
        for i in range(3):
            pieces[i].append(out[starts[i] : starts[i + 1]].cpu())
            done[i] += chunk[i]
    for i in range(3):
        assert torch.equal(torch.cat(pieces[i]), whole[i])
        assert torch.equal(pool[slots[i]].cpu(), hasher.history_row(seqs[i]))


def test_decode_updates_histories_in_place(device: torch.device) -> None:
    hasher = random_hasher(image=True)
    tables = HashTables.from_hasher(hasher, device)
    b = random.randint(2, 40)
    tokens = torch.randint(0, VOCAB, (b,))
    tokens[0] = -1  # a padding request (fixed captured batch size)
    tokens[-1] = hasher.image_token_id
    hist = random_histories(b, hasher.window - 1)
    real = tokens >= 0
    ones = torch.ones(int(real.sum()), dtype=torch.long)
    expected = hasher.hash_batch(tokens[real], ones, hist[real])
    got_hist = hist.clone().to(device)
    out = poisoned_ids(b, tables, device)
    got = hash_ids(tables, tokens.to(device), got_hist, mode="decode", out=out).cpu()
    assert torch.equal(got[real], expected) and bool((got[~real] == -1).all())
    assert torch.equal(got_hist.cpu()[real], hasher.next_histories(tokens[real], ones, hist[real]))
    assert torch.equal(got_hist.cpu()[~real], hist[~real])


def test_decode_steps_continue_an_extend(device: torch.device) -> None:
    hasher = random_hasher()
    tables = HashTables.from_hasher(hasher, device)
    seq = torch.randint(0, VOCAB, (random.randint(1, 30) + 5,))
    prompt, steps = seq[:-5], seq[-5:]
    hist = torch.full((1, hasher.window - 1), -1, dtype=torch.long, device=device)
    got = [
        hash_ids(
            tables, prompt.to(device), hist, starts=torch.tensor([0, prompt.numel()], device=device)
        )
    ]
    got += [hash_ids(tables, t.view(1).to(device), hist, mode="decode") for t in steps]
    assert torch.equal(torch.cat([g.cpu() for g in got]), hasher.hash(seq))


def test_bad_batches_are_named(device: torch.device) -> None:
    hasher = random_hasher()
    tables = HashTables.from_hasher(hasher, device)
    n1 = hasher.window - 1
    tokens = torch.randint(0, VOCAB, (6,), device=device)
    hist = torch.full((2, n1), -1, dtype=torch.long, device=device)
    starts = torch.tensor([0, 2, 6], device=device)
    with pytest.raises(EngramInputError, match="hash mode"):
        hash_ids(tables, tokens, hist, starts=starts, mode="verify")
    with pytest.raises(EngramInputError, match="needs starts"):
        hash_ids(tables, tokens, hist)
    with pytest.raises(EngramInputError, match="pass no starts"):
        hash_ids(tables, tokens[:2], hist, mode="decode", starts=starts)
    with pytest.raises(EngramInputError, match=f"histories must be int64 \\[requests, {n1}\\]"):
        hash_ids(tables, tokens, hist[:, :0], starts=starts)
    with pytest.raises(EngramInputError, match="pass slots"):
        hash_ids(tables, tokens, hist[:1], starts=starts)
    if device.type == "cpu":  # value checks would synchronise a GPU
        with pytest.raises(EngramInputError, match="vocabulary"):
            hash_ids(tables, torch.full((6,), VOCAB), hist, starts=starts)
        with pytest.raises(EngramInputError, match="non-decreasing"):
            hash_ids(tables, tokens, hist, starts=torch.tensor([0, 4, 2]))
        with pytest.raises(EngramInputError, match="distinct"):
            hash_ids(tables, tokens, hist, starts=starts, slots=torch.tensor([1, 1]))
