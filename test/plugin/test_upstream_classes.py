"""Our subclasses of upstream's Engram classes carry what an upstream-built instance does.

``PlacedEngramEmbedding`` runs upstream's constructor (on the meta device, its rows
replaced); ``SlotHasher`` cannot (upstream's builds its token map from a tokenizer), so
it sets upstream's attributes itself. Either way a new SGLang that adds, drops or
changes an attribute must fail here, not in a server: the instances' ``vars()`` are
compared, names and values (tensors by shape and dtype).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import torch
from sglang_engram.protocol.server_config import ENV_VAR, EngramServerConfig

from engram.model.tokenizer import ASSET, tokenizer_config
from engram.spec import EngramSpec
from test.plugin.tiny import engram_fields

# What only our classes hold (the rest is upstream's).
EMBEDDING_OURS = {"config", "layer_id", "table", "device"}
HASHER_OURS = {"reference", "spec"}


def _described(value: object) -> object:
    """``value`` with tensors as (shape, dtype), dicts described value by value."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, dict):
        return {k: _described(v) for k, v in value.items()}
    return value


def _compare(ours: torch.nn.Module, upstream: torch.nn.Module, ours_only: set[str]) -> None:
    mine, theirs = _described(vars(ours)), _described(vars(upstream))
    assert not ours_only & set(theirs), "upstream now sets an attribute of ours"
    assert set(mine) == set(theirs) | ours_only
    assert {name: mine[name] for name in theirs} == theirs


def test_placed_embedding_has_upstreams_attributes(sglang_with_plugin, monkeypatch):
    """Ours (dram behind the hot cache: the loader fills this rank's rows as upstream's
    does) against upstream's device table, on a random rank of TP=2."""
    from sglang.srt.layers.engram import EngramLayout
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    for switch in ("SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE", "SGLANG_OPT_DSV41_ENGRAM_PEER_SHARDS"):
        monkeypatch.delenv(switch, raising=False)
    config = EngramServerConfig(offload="dram", hot_cache_gb=0.001)
    monkeypatch.setenv(ENV_VAR, config.to_json())
    fields = engram_fields(layer_ids=(1, 14), n=3, heads=random.choice((3, 4)), head_dim=64)
    layout = EngramLayout.from_config(SimpleNamespace(**fields))
    index = random.randrange(2)
    args = (
        layout.num_embeddings[index],
        layout.head_dim,
        layout.layer_ids[index],
        layout.column_bounds(index),
    )
    rank = random.randrange(2)
    context = create_context(
        ServerArgs(model_path="dummy", tp_size=2),
        role="scheduler",
        ranks=SpawnRanks(world_rank=rank, dp_rank=None, gpu_id=rank),
    )
    with use_context(context):
        ours = PlacedEngramEmbedding(*args)
        upstream = PlacedEngramEmbedding.__base__(*args)
    assert type(ours) is PlacedEngramEmbedding and type(upstream) is not PlacedEngramEmbedding
    assert (upstream.row_start > 0) == (rank == 1)
    _compare(ours, upstream, EMBEDDING_OURS)


def test_slot_hasher_has_upstreams_attributes(sglang_with_plugin, tmp_path: Path):
    """Ours from the core library's token map against upstream's hasher built from the
    same tokenizer (the tiny model's)."""
    from sglang.srt.layers.engram import EngramHasher, EngramLayout, build_compressed_token_map
    from sglang_engram.models.engram_qwen3.hasher import SlotHasher
    from transformers import AutoTokenizer

    from engram import build_token_map

    (tmp_path / "tokenizer.json").write_bytes(ASSET.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(4096)))
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    _, compressed = build_compressed_token_map(tokenizer)
    fields = engram_fields(n=random.choice((2, 3, 4)), heads=random.choice((2, 4)))
    fields["engram_compressed_vocab_size"] = compressed
    layout = EngramLayout.from_config(SimpleNamespace(**fields))
    upstream = EngramHasher(layout, tokenizer, fields["engram_pad_token_id"], compressed)
    token_map, _ = build_token_map(tokenizer, cache=False)
    ours = SlotHasher(EngramSpec.from_hf_config(fields), token_map)
    _compare(ours, upstream, HASHER_OURS)
    # the comparison sees the hasher state upstream's scheduler side fills in
    slots = random.randint(1, 8)
    for hasher in (ours, upstream):
        hasher.init_history(slots, "cpu")
    _compare(ours, upstream, HASHER_OURS)
