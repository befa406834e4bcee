"""engram.build_token_map: upstream-exact compressed ids, cached per tokenizer content."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engram.errors import EngramInputError
from engram.model.tokenizer import ASSET, tokenizer_config
from engram.token_map import CACHE_ENV, build_token_map, cache_path, tokenizer_fingerprint
from test.core.upstream import upstream_engram

# Tokens that exercise every normalisation rule: case, accents ("CafÃ©" is the byte-level
# spelling of "Café"), NFKC ligatures, runs of whitespace, a lone space and a tab (kept as
# one space), and non-byte-level text that decodes to U+FFFD ("Élan", keyed raw).
EXTRA_TOKENS = ["CafÃ©", "CAFE", "cafe", "ﬁne", "  ", " ", "\t", "\n\n", "Élan", "Elan"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


@pytest.fixture
def tokenizer_dir(tmp_path):
    path = tmp_path / "tok"
    path.mkdir()
    (path / "tokenizer.json").write_bytes(ASSET.read_bytes())
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(4096)))
    return path


def _hf_tokenizer(path, extra=()):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    tok.add_tokens(list(extra))
    return tok


@pytest.mark.parametrize("extra", [(), EXTRA_TOKENS], ids=["tiny", "tiny+tricky"])
def test_matches_upstream(tokenizer_dir, extra):
    tok = _hf_tokenizer(tokenizer_dir, extra)
    expected, expected_size = upstream_engram().build_compressed_token_map(tok)
    ours, size = build_token_map(tok)
    assert ours.dtype == torch.int64
    assert ours.tolist() == expected
    assert size == expected_size
    # The map really compresses: case/space variants share ids, byte tokens stay apart.
    assert size < len(tok)
    if extra:
        same = tok.convert_tokens_to_ids(["CafÃ©", "CAFE", "cafe"])
        assert len({int(ours[i]) for i in same}) == 1
        raw, plain = tok.convert_tokens_to_ids(["Élan", "Elan"])
        assert ours[raw] != ours[plain]


def test_every_tokenizer_form_gives_the_same_map(tokenizer_dir):
    from tokenizers import Tokenizer

    hf, _ = build_token_map(_hf_tokenizer(tokenizer_dir), cache=False)
    from_dir, _ = build_token_map(tokenizer_dir, cache=False)
    from_file, _ = build_token_map(tokenizer_dir / "tokenizer.json", cache=False)
    raw, _ = build_token_map(Tokenizer.from_file(str(ASSET)), cache=False)
    assert torch.equal(hf, from_dir) and torch.equal(hf, from_file) and torch.equal(hf, raw)


def test_second_call_reads_the_cache_file(tokenizer_dir):
    tok = _hf_tokenizer(tokenizer_dir)
    first, size = build_token_map(tok)
    path = cache_path(tokenizer_fingerprint(tok.backend_tokenizer, len(tok)))
    assert path.is_file()
    assert np.array_equal(np.load(path), first.numpy())
    # Plant a different (valid) map under the same key: the next call must return it.
    planted = first[torch.randperm(first.numel())].numpy()
    np.save(path, planted)
    second, second_size = build_token_map(tok)
    assert np.array_equal(second.numpy(), planted)
    assert second_size == size
    assert not list(path.parent.glob("*.tmp"))  # atomic writes leave no leftovers


def test_changed_tokenizer_gets_its_own_key(tokenizer_dir):
    tok = _hf_tokenizer(tokenizer_dir)
    base, base_size = build_token_map(tok)
    key = tokenizer_fingerprint(tok.backend_tokenizer, len(tok))
    tok.add_tokens(["Zebra-crossing"])
    changed, changed_size = build_token_map(tok)
    new_key = tokenizer_fingerprint(tok.backend_tokenizer, len(tok))
    assert new_key != key
    assert cache_path(key).is_file() and cache_path(new_key).is_file()
    assert changed.numel() == base.numel() + 1
    assert changed_size == base_size + 1
    assert torch.equal(changed[:-1], base)


def test_another_tokenizers_version_gets_its_own_key(tokenizer_dir, monkeypatch):
    import tokenizers

    tok = _hf_tokenizer(tokenizer_dir)
    build_token_map(tok)
    key = tokenizer_fingerprint(tok.backend_tokenizer, len(tok))
    monkeypatch.setattr(tokenizers, "__version__", f"{tokenizers.__version__}.post1")
    new_key = tokenizer_fingerprint(tok.backend_tokenizer, len(tok))
    assert new_key != key and not cache_path(new_key).exists()
    build_token_map(tok)  # built again and cached under the new key
    assert cache_path(key).is_file() and cache_path(new_key).is_file()


def test_unusable_cache_file_is_rebuilt(tokenizer_dir):
    tok = _hf_tokenizer(tokenizer_dir)
    expected, _ = build_token_map(tok, cache=False)
    path = cache_path(tokenizer_fingerprint(tok.backend_tokenizer, len(tok)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a numpy file")
    got, _ = build_token_map(tok)
    assert torch.equal(got, expected)
    assert np.array_equal(np.load(path), expected.numpy())


def test_no_cache_writes_nothing(tokenizer_dir, tmp_path):
    build_token_map(_hf_tokenizer(tokenizer_dir), cache=False)
    assert not (tmp_path / "cache").exists()


def test_bad_tokenizer_is_named(tmp_path):
    with pytest.raises(EngramInputError, match="needs a transformers \\*fast\\* tokenizer.*int"):
        build_token_map(42)
    with pytest.raises(EngramInputError, match="does not exist"):
        build_token_map(tmp_path / "missing")
