"""EngramSpec against upstream's EngramLayout / compute_hash_multipliers."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
from engram_testing.plain import total_table_bytes

from engram import EngramConfigError, EngramSpec
from engram.presets import DSV41_FLASH
from test.core.upstream import upstream_engram

DSV41 = dict(DSV41_FLASH)


def random_config(rng: random.Random) -> dict:
    """A random Engram config whose num_embeddings are taken from upstream's layout."""
    cfg = {
        "engram_layer_ids": rng.sample(range(0, 48), rng.randint(1, 4)),
        "engram_max_ngram_size": rng.randint(2, 5),
        "engram_vocab_size": rng.randint(50, 200_000),
        "engram_n_heads": rng.randint(1, 8),
        "engram_head_dim": 32 * rng.randint(1, 8),
        "engram_compressed_vocab_size": rng.randint(10, 150_000),
    }
    cfg["engram_num_embeddings"] = [0] * len(cfg["engram_layer_ids"])
    layout = upstream_engram().EngramLayout.from_config(SimpleNamespace(**cfg))
    cfg["engram_num_embeddings"] = [layout.column_bounds(i)[-1] for i in range(len(layout.primes))]
    return cfg


@pytest.mark.parametrize("trial", range(8))
def test_layout_and_multipliers_match_upstream(trial: int) -> None:
    up = upstream_engram()
    cfg = random_config(random.Random())
    spec = EngramSpec.from_hf_config(cfg)
    layout = up.EngramLayout.from_config(SimpleNamespace(**cfg))
    assert spec.primes == layout.primes
    assert list(spec.num_embeddings) == [layout.column_bounds(i)[-1] for i in range(spec.n_layers)]
    for i in range(spec.n_layers):
        assert spec.offsets[i].tolist() == list(layout.column_bounds(i)[:-1])
    vocab = cfg["engram_compressed_vocab_size"]
    expected = up.compute_hash_multipliers(layout.layer_ids, layout.max_ngram_size, vocab)
    assert torch.equal(spec.multipliers(), expected)
    assert spec.offsets.shape == (spec.n_layers, spec.n_cols)


def test_dsv41_flash_numbers() -> None:
    spec = EngramSpec.from_hf_config(DSV41)
    assert spec.prime_sums == (384_006_168, 384_016_682)
    assert spec.n_layers * spec.n_cols == 48 and spec.row_bytes == 264
    mult = spec.multipliers()
    assert mult[0].tolist() == [76632096046245, 4839876093313, 35959672319349, 73987337458391]
    assert mult[1].tolist() == [67716810739261, 51510806800915, 30921347202721, 82619226485591]
    all_primes = sorted(p for layer in spec.primes for order in layer for p in order)
    assert len(set(all_primes)) == 48 and all_primes[0] > 16_000_000
    assert round(total_table_bytes(spec) / 2**30, 2) == 188.83


def test_config_object_with_attributes() -> None:
    spec = EngramSpec.from_hf_config(SimpleNamespace(**DSV41, hidden_size=5120, hc_mult=4))
    assert spec.hidden_size == 5120 and spec.hc_mult == 4 and spec.layer_ids == (1, 14)


def test_prime_sum_mismatch_names_layer_and_numbers() -> None:
    bad = dict(DSV41, engram_num_embeddings=[384_006_168, 384_016_683])
    with pytest.raises(EngramConfigError, match=r"layer 14.*384,016,682.*384,016,683"):
        EngramSpec.from_hf_config(bad)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"engram_layer_ids": []}, "engram_layer_ids is empty"),
        ({"engram_n_heads": None}, "missing engram_n_heads"),
        ({"engram_num_embeddings": [384_006_168]}, "has 1 entries but engram_layer_ids has 2"),
        ({"engram_head_dim": 100}, "multiple of 32"),
        ({"engram_max_ngram_size": 1}, "engram_max_ngram_size must be >= 2"),
        ({"engram_layer_ids": [1, 1]}, "duplicates"),
    ],
)
def test_bad_configs_name_the_field(change: dict, message: str) -> None:
    with pytest.raises(EngramConfigError, match=message):
        EngramSpec.from_hf_config(dict(DSV41, **change))


def test_multipliers_need_compressed_vocab() -> None:
    spec = EngramSpec.from_hf_config(dict(DSV41, engram_compressed_vocab_size=None))
    with pytest.raises(EngramConfigError, match="compressed vocab size"):
        spec.multipliers()
    assert spec.multipliers(99_092).shape == (2, 4)
