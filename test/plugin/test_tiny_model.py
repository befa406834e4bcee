"""The tiny model's SGLang side on the CPU: weight routing and per-request hashing.

The hashing tests drive upstream's own scheduler-side history code
(``NgramEmbeddingManager._prepare_engram_history``) and upstream's hasher forward
with our :class:`SlotHasher`. The batches are stand-ins for what a GPU scheduler
builds (``SimpleNamespace`` with the fields those functions read).
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
from sglang_engram.models.engram_qwen3.weights import PARAM, TABLE_TENSOR, Route, route_weight

from engram.hashing import NgramHasher
from engram.spec import EngramSpec
from test.plugin.tiny import engram_fields, random_token_map

VOCAB = 512


def test_checkpoint_names_route_to_sglang_parameters():
    i = random.randrange(4)
    cases = {
        "model.embed_tokens.weight": Route(PARAM, "model.embed_tokens.weight"),
        f"model.layers.{i}.self_attn.q_proj.weight": Route(
            PARAM, f"model.layers.{i}.self_attn.qkv_proj.weight", "q"
        ),
        f"model.layers.{i}.self_attn.k_proj.weight": Route(
            PARAM, f"model.layers.{i}.self_attn.qkv_proj.weight", "k"
        ),
        f"model.layers.{i}.self_attn.v_proj.weight": Route(
            PARAM, f"model.layers.{i}.self_attn.qkv_proj.weight", "v"
        ),
        f"model.layers.{i}.self_attn.o_proj.weight": Route(
            PARAM, f"model.layers.{i}.self_attn.o_proj.weight"
        ),
        f"model.layers.{i}.self_attn.q_norm.weight": Route(
            PARAM, f"model.layers.{i}.self_attn.q_norm.weight"
        ),
        f"model.layers.{i}.mlp.gate_proj.weight": Route(
            PARAM, f"model.layers.{i}.mlp.gate_up_proj.weight", 0
        ),
        f"model.layers.{i}.mlp.up_proj.weight": Route(
            PARAM, f"model.layers.{i}.mlp.gate_up_proj.weight", 1
        ),
        f"model.layers.{i}.mlp.down_proj.weight": Route(
            PARAM, f"model.layers.{i}.mlp.down_proj.weight"
        ),
        "lm_head.weight": Route(PARAM, "lm_head.weight"),
        f"model.layers.{i}.engram.embed.weight": Route(TABLE_TENSOR, "weight", layer_id=i),
        f"model.layers.{i}.engram.embed.scale": Route(TABLE_TENSOR, "scale", layer_id=i),
        f"model.layers.{i}.engram.wkv.weight": Route(
            PARAM, f"model.layers.{i}.engram.wkv.weight", layer_id=i
        ),
        f"model.layers.{i}.engram.q_weight": Route(
            PARAM, f"model.layers.{i}.engram.q_weight", layer_id=i
        ),
    }
    for name, want in cases.items():
        assert route_weight(name, engram_enabled=True) == want, name


def test_engram_off_loads_nothing_engram():
    i = random.randrange(4)
    for piece in ("embed.weight", "embed.scale", "wkv.weight", "q_weight", "k_weight"):
        assert route_weight(f"model.layers.{i}.engram.{piece}", engram_enabled=False) is None
    kept = route_weight(f"model.layers.{i}.input_layernorm.weight", engram_enabled=False)
    assert kept == Route(PARAM, f"model.layers.{i}.input_layernorm.weight")


# ---- hashing through SGLang's per-request slots --------------------------------------


@pytest.fixture
def hashers(sglang_with_plugin):
    from sglang_engram.models.engram_qwen3.hasher import SlotHasher

    n = random.choice((2, 3, 4))
    spec = EngramSpec.from_hf_config(engram_fields(n=n, heads=random.choice((2, 4))))
    token_map = random_token_map(VOCAB, random.randint(50, 200))
    return SlotHasher(spec, token_map), NgramHasher(spec, token_map)


def _manager(hasher):
    from sglang.srt.model_executor.model_runner_components.ngram_embedding_manager import (
        NgramEmbeddingManager,
    )

    return NgramEmbeddingManager(enabled=False, table=None, n=0, engram_hasher=hasher)


def _extend(manager, hasher, reqs, starts, ends):
    """One extend batch of chunks ``[start, end)``; returns each request's hash ids."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    sched = SimpleNamespace(
        forward_mode=ForwardMode.EXTEND,
        reqs=[SimpleNamespace(full_untruncated_fill_ids=r["ids"]) for r in reqs],
        prefix_lens=starts,
    )
    manager._prepare_engram_history(sched)  # upstream fills batch.engram_history
    chunks = [r["ids"][s:e] for r, s, e in zip(reqs, starts, ends, strict=True)]
    lens = torch.tensor([len(c) for c in chunks])
    batch = SimpleNamespace(
        forward_mode=ForwardMode.EXTEND,
        req_pool_indices=torch.tensor([r["slot"] for r in reqs]),
        positions=torch.cat([torch.arange(s, e) for s, e in zip(starts, ends, strict=True)]),
        extend_seq_lens=lens,
        extend_start_loc=torch.cumsum(lens, 0) - lens,
        extend_seq_lens_cpu=lens.tolist(),
        engram_history=sched.engram_history,
        out_cache_loc=torch.arange(1, int(lens.sum()) + 1),
    )
    out = hasher(torch.tensor(sum(chunks, [])), batch)
    return list(out.split(lens.tolist()))


def _decode(hasher, reqs, tokens):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    batch = SimpleNamespace(
        forward_mode=ForwardMode.DECODE,
        req_pool_indices=torch.tensor([r["slot"] for r in reqs]),
        positions=torch.tensor([len(r["ids"]) for r in reqs]),
        out_cache_loc=torch.arange(1, len(reqs) + 1),
    )
    out = hasher(torch.tensor(tokens), batch)
    for r, t in zip(reqs, tokens, strict=True):
        r["ids"].append(t)
    return out


def test_slot_hasher_uses_the_core_layout(hashers):
    ours, reference = hashers
    assert torch.equal(ours.multipliers, reference.multipliers)
    assert torch.equal(ours.primes, reference.primes)
    assert torch.equal(ours.offsets, reference.offsets)
    assert ours.pad_id == reference.pad_compressed


def test_slot_hasher_buffers_follow_the_model_build_device(sglang_with_plugin):
    """SGLang builds the model under ``with torch.device(<gpu>)`` and never moves it:
    the hash constants must land there (``meta`` stands in for the GPU)."""
    from sglang_engram.models.engram_qwen3.hasher import SlotHasher

    spec = EngramSpec.from_hf_config(engram_fields())
    token_map = random_token_map(VOCAB, random.randint(50, 200))
    with torch.device("meta"):
        hasher = SlotHasher(spec, token_map)
    for name in ("token_map", "multipliers", "primes", "offsets"):
        assert getattr(hasher, name).device.type == "meta", name
    assert hasher.reference.token_map.device.type == "cpu"  # the read-ahead hashes on the host


def test_chunked_prefill_then_decode_hash_like_one_pass(hashers):
    ours, reference = hashers
    ours.init_history(8, "cpu")
    manager = _manager(ours)
    reqs = [
        {"slot": s, "ids": torch.randint(0, VOCAB, (random.randint(5, 20),)).tolist()}
        for s in random.sample(range(8), 3)
    ]
    cut = [random.randint(1, len(r["ids"]) - 1) for r in reqs]
    got = [[c] for c in _extend(manager, ours, reqs, [0] * 3, cut)]
    for i, part in enumerate(_extend(manager, ours, reqs, cut, [len(r["ids"]) for r in reqs])):
        got[i].append(part)
    for _ in range(random.randint(2, 5)):
        step = _decode(ours, reqs, torch.randint(0, VOCAB, (3,)).tolist())
        for i in range(3):
            got[i].append(step[i : i + 1])
    for r, parts in zip(reqs, got, strict=True):
        assert torch.equal(torch.cat(parts), reference.hash(torch.tensor(r["ids"])))


def test_pd_decode_worker_hashes_like_a_single_server(hashers):
    """The decode worker never ran the prompt: upstream seeds the slot from it."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    ours, reference = hashers
    ours.init_history(4, "cpu")
    prompt = torch.randint(0, VOCAB, (random.randint(1, 30),)).tolist()
    first = random.randrange(VOCAB)  # sampled by the prefill worker
    req = SimpleNamespace(
        origin_input_ids=prompt,
        output_ids=[first],
        kv=SimpleNamespace(req_pool_idx=random.randrange(4)),
    )
    _manager(ours)._prepare_engram_history(
        SimpleNamespace(forward_mode=ForwardMode.PREBUILT, reqs=[req])
    )
    state = {"slot": req.kv.req_pool_idx, "ids": list(prompt)}
    ids = [_decode(ours, [state], [first])]
    for _ in range(3):
        ids.append(_decode(ours, [state], [random.randrange(VOCAB)]))
    single = reference.hash(torch.tensor(state["ids"]))
    assert torch.equal(torch.cat(ids), single[len(prompt) :])
