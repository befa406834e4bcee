"""A checkpoint's tables found in the format a family names, and refused in one line
when the checkpoint holds none of that format."""

from __future__ import annotations

import random

import pytest

from engram.errors import EngramTableError
from engram.ssd.checkpoint import find_checkpoint_tables
from test.plugin.tiny import engram_fields
from test.ssd.helpers import write_checkpoint


def test_the_named_format_finds_the_tables_and_another_is_refused(tmp_path) -> None:
    layers = tuple(sorted(random.sample(range(1, 30), 2)))
    fields = engram_fields(layer_ids=layers, n=3, heads=4, head_dim=64)
    written = write_checkpoint(tmp_path, {"architectures": ["DeepseekV4ForCausalLM"], **fields})
    found = find_checkpoint_tables(tmp_path, "engram")
    assert found.format.name == "engram" and sorted(found.tables) == sorted(written)
    assert sorted(find_checkpoint_tables(tmp_path).tables) == sorted(written)
    with pytest.raises(EngramTableError, match="has no Qwen3.8-Flash-Next PLE"):
        find_checkpoint_tables(tmp_path, "qwen4-exp-ple")
    with pytest.raises(EngramTableError, match="no checkpoint format 'nope'; known: engram"):
        find_checkpoint_tables(tmp_path, "nope")
