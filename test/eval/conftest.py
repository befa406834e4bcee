"""A random-weight tiny Engram model for the quality tools' tests: its Engram layers change
the logits visibly, which is all the regime and scan tests need."""

from __future__ import annotations

import pytest

from engram.model import BuildOptions, TinyEngramModel, build_tiny_model
from engram.model.tokenizer import load_tokenizer
from engram.token_map import CACHE_ENV


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        out = tmp_path_factory.mktemp("tiny")
        build_tiny_model(out, BuildOptions(seed=int.from_bytes(b"t12", "big") % 1000))
        yield out


@pytest.fixture(scope="session")
def tiny(tiny_dir):
    model = TinyEngramModel.from_pretrained(tiny_dir, "hbm")
    yield model
    model.close()


@pytest.fixture(scope="session")
def tokenizer(tiny_dir):
    return load_tokenizer(tiny_dir)
