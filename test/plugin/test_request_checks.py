"""Token ids outside an Engram model's vocabulary are refused before they reach the
scheduler (the real server's 400 is tested in test/serving/test_placements.py)."""

from __future__ import annotations

import random

import pytest
from sglang_engram.integration.request_checks import first_bad_id, valid_id_bound


class _Tokenizer:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def test_the_bound_is_the_smaller_of_vocabulary_and_tokenizer():
    vocab = random.randrange(100, 10_000)
    assert valid_id_bound(vocab, None) == vocab
    assert valid_id_bound(vocab, _Tokenizer(vocab - 7)) == vocab - 7
    assert valid_id_bound(vocab, _Tokenizer(vocab + 7)) == vocab


@pytest.mark.parametrize("bad", ["negative", "at_bound", "far"])
def test_the_first_id_outside_the_range_is_named(bad):
    bound = random.randrange(100, 10_000)
    ids = [random.randrange(bound) for _ in range(random.randint(2, 50))]
    assert first_bad_id(ids, bound) is None
    value = {"negative": -random.randrange(1, 9), "at_bound": bound, "far": bound * 1000}[bad]
    at = random.randrange(len(ids))
    ids[at] = value
    ids.append(-1)  # a later bad id is not the first
    assert first_bad_id(ids, bound) == (at, value)
