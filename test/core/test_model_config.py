"""One reader of a model directory's ``config.json``, one error policy: a missing
directory or file, text that is not JSON and JSON that is not an object are each one
:class:`EngramConfigError` naming the path, whoever reads it (the tiny model, the profile
command, the SSD conversion, the plugin's model facts)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sglang_engram.protocol.model_facts import read_model_facts

from engram.errors import EngramConfigError
from engram.model.directory import read_config
from engram.model_config import has_model_config, read_model_config
from engram.ssd.checkpoint import find_checkpoint_tables
from test.ssd.helpers import write_checkpoint

CONFIG = {"engram_layer_ids": [1], "engram_num_embeddings": [64], "engram_head_dim": 64}
BAD = {
    "not JSON": ('{"engram_layer_ids": [1', "is not valid JSON"),
    "not an object": ("[1, 2, 3]", "holds no JSON object"),
}
READERS = {
    "core": read_model_config,
    "tiny model": read_config,
    "conversion": find_checkpoint_tables,
    "plugin": lambda d: read_model_facts(str(d)),
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_bad_config_json_is_one_error_naming_it(tmp_path: Path, reader: str, bad: str) -> None:
    write_checkpoint(tmp_path, CONFIG)
    text, says = BAD[bad]
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(EngramConfigError) as err:
        READERS[reader](tmp_path)
    message = str(err.value)
    assert f"{tmp_path / 'config.json'} {says}" in message and "\n" not in message


def test_a_missing_directory_or_file_is_named_and_a_good_one_is_read(tmp_path: Path) -> None:
    with pytest.raises(EngramConfigError, match=f"model directory {tmp_path / 'none'} does not"):
        read_model_config(tmp_path / "none")
    with pytest.raises(EngramConfigError, match=f"{tmp_path} has no config.json; fix"):
        read_model_config(tmp_path)
    assert not has_model_config(tmp_path) and read_model_facts(str(tmp_path)).hf_config is None
    config = dict(CONFIG, seed=random.randint(0, 1 << 30))
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert has_model_config(tmp_path) and read_model_config(tmp_path) == config
    assert read_model_facts(str(tmp_path)).hf_config == config
