"""DeepSeek-V4.1's Engram layers in every placement, built on the CPU.

Upstream's ``Engram`` and ``EngramEmbedding`` build on the CPU inside a published
single-rank runtime context. ``hbm`` (and ``dram`` without a hot cache, which pins
host memory: GPU only) are served by upstream's class itself; ``ssd``, ``off`` and
``dram`` with the hot cache by ours. Upstream's class built directly is the oracle for
the rows every placement returns.
"""

from __future__ import annotations

import os
import random
from types import SimpleNamespace

import pytest
import safetensors.torch
import torch
from sglang_engram.models.deepseek_v41.family import DeepseekV41
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig
from sglang_engram.tables import served as table_registry
from sglang_engram.tables import weight_filter as loading

from test.plugin.tiny import engram_fields, random_table

HIDDEN = 64
# ours: dram behind a small HBM hot cache (only our tables have one)
OURS = EngramServerConfig(offload="dram", hot_cache_gb=0.001)
UPSTREAM = EngramServerConfig(offload="hbm")


def _upstream_cls():
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    return PlacedEngramEmbedding.__base__


def _upstream_serves(config: EngramServerConfig) -> bool:
    return DeepseekV41().served_by_upstream(config) is not None


def _hash_ids(layout, index, tokens):
    bounds = layout.column_bounds(index)
    cols = [
        torch.randint(lo, hi, (tokens,)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return torch.stack(cols, dim=1)


@pytest.mark.parametrize("config", [UPSTREAM, OURS], ids=["hbm", "dram+hot-cache"])
def test_each_placement_is_served_by_its_code_with_upstreams_rows(placed, layout, config):
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding
    from sglang_engram.models.deepseek_v41.upstream_embedding import ATTR

    index = random.randrange(2)
    served, ref = placed(config, index)
    [entry] = table_registry.served(get_runtime().tables)
    assert entry.layer_id == layout.layer_ids[index] and entry.table.placement == config.offload
    if _upstream_serves(config):
        assert type(served) is _upstream_cls() and served.host_table is None
        assert getattr(served, ATTR) is entry.table
    else:
        assert type(served) is PlacedEngramEmbedding and served.table is entry.table
    ids = _hash_ids(layout, index, random.randint(1, 40))
    assert torch.equal(served(ids).view(torch.int16), ref(ids).view(torch.int16))


def _host_table_stand_in(monkeypatch, switch="SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE"):
    """Stand-in for upstream's host-table allocation (it pins host memory with
    cudaHostRegister: GPU only): records upstream's ``switch`` and allocates the rows."""
    from sglang.srt.environ import envs

    upstream = _upstream_cls()
    calls = []

    def init_host_table(self, num_embeddings, dim, layer_id):
        calls.append(getattr(envs, switch).get())
        weight = torch.empty(self.rows, dim, dtype=torch.float8_e4m3fn)
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        scale = torch.empty(self.rows, dim // 32, dtype=torch.float8_e8m0fnu)
        self.scale = torch.nn.Parameter(scale, requires_grad=False)

    monkeypatch.setattr(upstream, "_init_host_table", init_host_table)
    return calls


@pytest.mark.parametrize("user_env", [None, "0", "1"])
def test_the_flag_not_the_environment_switches_upstreams_host_table(
    monkeypatch, cpu_context, layout, user_env
):
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    if user_env is None:
        monkeypatch.delenv("SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE", raising=False)
    else:
        monkeypatch.setenv("SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE", user_env)
    calls = _host_table_stand_in(monkeypatch)
    args = (layout.num_embeddings[0], layout.head_dim, layout.layer_ids[0])
    get_runtime().reset()
    try:
        for offload, pinned in (("dram", [True]), ("hbm", [])):
            calls.clear()
            get_runtime().use_config(EngramServerConfig(offload=offload))
            built = PlacedEngramEmbedding(*args, column_bounds=layout.column_bounds(0))
            assert type(built) is _upstream_cls() and calls == pinned, offload
            # the user's setting is back once the table is built
            assert os.environ.get("SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE") == user_env
        assert [e.table.placement for e in table_registry.served(get_runtime().tables)] == [
            "dram",
            "hbm",
        ]
    finally:
        get_runtime().reset()


def test_dram_holds_the_loaded_rows_once(monkeypatch, cpu_context, layout):
    """The loader writes into the buffer our dram table keeps: no second copy."""
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    get_runtime().use_config(OURS)
    ours = PlacedEngramEmbedding(
        layout.num_embeddings[0], layout.head_dim, layout.layer_ids[0], layout.column_bounds(0)
    )
    targets = (ours.weight.data_ptr(), ours.scale.data_ptr())
    weight, scale = random_table(layout.num_embeddings[0], layout.head_dim)
    ours.weight.weight_loader(ours.weight, weight.view(torch.float8_e4m3fn))
    ours.scale.weight_loader(ours.scale, scale.view(torch.float8_e8m0fnu))
    ours.finish_load("layer 1")
    dram = ours.table.inner  # the dram table behind the hot cache
    try:
        assert ours.weight.numel() == 0 and ours.scale.numel() == 0
        assert (dram.weight.data_ptr(), dram.scale.data_ptr()) == targets
        assert ours.table.memory()["dram"] == weight.numel() + scale.numel()
        assert torch.equal(dram.weight, weight) and torch.equal(dram.scale, scale)
    finally:
        get_runtime().reset()


def test_off_holds_no_rows_and_skips_the_tensors(placed, layout):
    ours, _ = placed(EngramServerConfig(offload="off"), 1)
    assert ours.table is None and ours.weight.numel() == 0 and ours.scale.numel() == 0
    layer, other = layout.layer_ids[1], layout.layer_ids[0]
    assert loading.is_skipped(get_runtime().skips, f"layers.{layer}.engram.embed.weight")
    assert loading.is_skipped(get_runtime().skips, f"model.layers.{layer}.engram.embed.scale")
    assert not loading.is_skipped(get_runtime().skips, f"layers.{other}.engram.embed.weight")
    assert not loading.is_skipped(get_runtime().skips, f"layers.{layer}.engram.wkv.weight")


def _engram(layout, monkeypatch, config, embedding_cls=None):
    import sglang.srt.layers.engram as upstream

    get_runtime().use_config(config)
    if embedding_cls is not None:
        monkeypatch.setattr(upstream, "EngramEmbedding", embedding_cls)
    config = SimpleNamespace(rms_norm_eps=1e-6, hidden_size=HIDDEN, hc_mult=2)
    # SGLang builds models under the checkpoint's default dtype (bf16 here).
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        module = upstream.Engram(config, layout.layer_ids[0], layout)
    finally:
        torch.set_default_dtype(default)
    monkeypatch.undo()
    return module


def test_engram_layers_match_upstream_count_lookups_and_off_is_identity(
    placed, layout, monkeypatch
):
    """An Engram layer served by our tables or by upstream's (as SGLang builds them)
    computes what upstream's own layer does; both count their lookups; off passes
    the residual through."""
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    get_runtime().reset()
    ours = _engram(layout, monkeypatch, OURS)
    served = _engram(layout, monkeypatch, UPSTREAM)
    ref = _engram(layout, monkeypatch, UPSTREAM, _upstream_cls())
    assert type(ours.embed) is PlacedEngramEmbedding
    assert type(served.embed) is type(ref.embed) is _upstream_cls()
    weight, scale = random_table(layout.num_embeddings[0], layout.head_dim)
    for module in (ours, served, ref):
        module.embed.weight.weight_loader(module.embed.weight, weight.view(torch.float8_e4m3fn))
        module.embed.scale.weight_loader(module.embed.scale, scale.view(torch.float8_e8m0fnu))
        module.embed.finish_load("layer")
    ref.wkv.weight.data.copy_(torch.randn_like(ref.wkv.weight) * 0.05)
    for module in (ours, served):
        for name in ("wkv.weight", "q_weight", "k_weight"):
            dict(module.named_parameters())[name].data.copy_(dict(ref.named_parameters())[name])
    tokens = random.randint(1, 16)
    x = torch.randn(tokens, 2, HIDDEN, dtype=torch.bfloat16)
    ids = _hash_ids(layout, 0, tokens)
    no_image = torch.zeros(tokens, dtype=torch.long)
    want = ref(x, ids, input_ids=no_image)
    assert not torch.equal(want, x)
    for module in (ours, served):
        assert torch.equal(module(x, ids, input_ids=no_image), want)
    counted = {
        e.table.placement: e.table.counters.stats()
        for e in table_registry.served(get_runtime().tables)
    }
    row_bytes = layout.head_dim + layout.head_dim // 32
    for placement in ("dram", "hbm"):
        assert counted[placement]["lookups"] == 1, placement
        assert counted[placement]["rows_requested"] == ids.numel(), placement
    assert counted["hbm"]["bytes_read"] == {"hbm": ids.numel() * row_bytes}
    get_runtime().reset()

    off = _engram(layout, monkeypatch, EngramServerConfig(offload="off"))
    assert off(x, ids, input_ids=no_image) is x


def test_loader_never_reads_skipped_tables(sglang_with_plugin, tmp_path):
    """Every safetensors loader of SGLang leaves the skipped tables unread: single- and
    multi-threaded, with and without mmap, fastsafetensors and instanttensor (those two
    need a GPU for the files without tables, so here every file holds one)."""
    from sglang.srt.model_loader import weight_utils

    tensors = {
        "layers.1.engram.embed.weight": torch.randint(0, 255, (64, 32), dtype=torch.uint8),
        "layers.1.engram.embed.scale": torch.randint(100, 130, (64, 1), dtype=torch.uint8),
        "layers.1.engram.wkv.weight": torch.randn(8, 4),
        "embed.weight": torch.randn(16, 4),
        "norm.weight": torch.randn(random.randint(4, 16)),
    }
    # two shards with a table tensor each, and one without
    files = [str(tmp_path / f"{i}.safetensors") for i in range(3)]
    table_names = ["layers.1.engram.embed.weight", "layers.1.engram.embed.scale"]
    shards = [
        [table_names[0], "embed.weight"],
        [table_names[1], "layers.1.engram.wkv.weight"],
        ["norm.weight"],
    ]
    for path, names in zip(files, shards, strict=True):
        safetensors.torch.save_file({k: tensors[k] for k in names}, path)
    iterators = {
        "single": (weight_utils.safetensors_weights_iterator, {}),
        "single, no mmap": (weight_utils.safetensors_weights_iterator, {"disable_mmap": True}),
        "threaded": (
            weight_utils.buffered_multi_thread_safetensors_weights_iterator,
            {"max_workers": 2},
        ),
        "threaded, no mmap": (
            weight_utils.buffered_multi_thread_safetensors_weights_iterator,
            {"max_workers": 2, "disable_mmap": True},
        ),
        "fastsafetensors": (weight_utils.fastsafetensors_weights_iterator, {}),
        "instanttensor": (weight_utils.instanttensor_weights_iterator, {}),
    }
    for kind, (iterate, options) in iterators.items():
        on_cpu = "tensor" not in kind
        try:
            loading.skip_tables(get_runtime().skips, layers={1})
            got = dict(iterate(files if on_cpu else files[:2], **options))
        finally:
            get_runtime().reset()
        want = {n for n in tensors if n not in table_names and (on_cpu or n != "norm.weight")}
        assert set(got) == want, kind
        assert all(torch.equal(got[k], tensors[k]) for k in got)
        if on_cpu:
            assert set(dict(iterate(files, **options))) == set(tensors), kind


@pytest.mark.parametrize("config", [UPSTREAM, OURS], ids=["upstream hbm", "ours dram+hot"])
@pytest.mark.parametrize("heads", [4, 3], ids=["column-aligned", "row-split"])
def test_tp_shards_own_upstreams_rows(sglang_with_plugin, monkeypatch, config, heads):
    """TP=2 (two ranks' contexts in one process), for each implementation as SGLang
    builds it: each rank's shard owns upstream's rows, and the shards' zero-filled
    lookups add up (upstream's all-reduce) to the whole table's rows."""
    from sglang.srt.layers.engram import EngramLayout, shard_range
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    fields = engram_fields(layer_ids=(1, 14), n=3, heads=heads, head_dim=64)
    layout = EngramLayout.from_config(SimpleNamespace(**fields))
    get_runtime().reset()
    get_runtime().use_config(config)
    args = (layout.num_embeddings[1], layout.head_dim, 14, layout.column_bounds(1))
    weight, scale = random_table(layout.num_embeddings[1], layout.head_dim)
    ids = _hash_ids(layout, 1, random.randint(1, 40))
    total = {"served": 0, "upstream": 0}
    reads = {}
    for rank in (0, 1):
        context = create_context(
            ServerArgs(model_path="dummy", tp_size=2),
            role="scheduler",
            ranks=SpawnRanks(world_rank=rank, dp_rank=None, gpu_id=rank),
        )
        with use_context(context):
            served = PlacedEngramEmbedding(*args)
            upstream = _upstream_cls()(*args)
        assert isinstance(served, PlacedEngramEmbedding) != _upstream_serves(config)
        for module in (served, upstream):
            module.weight.weight_loader(module.weight, weight.view(torch.float8_e4m3fn))
            module.scale.weight_loader(module.scale, scale.view(torch.float8_e8m0fnu))
        served.finish_load(f"layer 14 rank {rank}")
        start, end = shard_range(args[0], args[3], rank, 2)
        assert (served.row_start, served.rows) == (start, end - start)
        assert table_registry.served(get_runtime().tables)[-1].table.num_rows == end - start
        assert table_registry.served(get_runtime().tables)[-1].row_start == start
        mine, theirs = served._owned_rows(ids), upstream._owned_rows(ids)
        assert torch.equal(mine.view(torch.int16), theirs.view(torch.int16))
        seen = table_registry.served(get_runtime().tables)[-1].table
        if _upstream_serves(config):  # counted as Engram.embed_rows' hook does
            seen.record(ids.numel(), seen.start())
            row_bytes = layout.head_dim + layout.head_dim // 32
            assert seen.memory() == {"hbm": (end - start) * row_bytes}
        reads[rank] = seen.counters.stats()["unique_rows"]
        total["served"] = total["served"] + mine.float()
        total["upstream"] = total["upstream"] + theirs.float()
    get_runtime().reset()
    assert torch.equal(total["served"], total["upstream"])
    if _upstream_serves(config):
        # each id's row is read by exactly one rank: counted once, by TP rank 0
        assert reads == {0: ids.numel(), 1: 0}
    want = (
        weight.view(torch.float8_e4m3fn)[ids].float().unflatten(-1, (-1, 32))
        * scale.view(torch.float8_e8m0fnu)[ids].float().unsqueeze(-1)
    ).flatten(-2)
    assert torch.equal(total["served"], want.to(torch.bfloat16).float())


def test_cache_flags_are_budgets_shared_by_the_tables(monkeypatch, cpu_context, layout):
    """--engram-hot-cache-gb is per GPU: each of the model's Engram tables gets its
    share (the context's model path is no local checkpoint: DSv4.1's two tables), and
    never more than its whole table."""
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    rows = layout.num_embeddings[0]
    whole = rows * layout.head_dim * 2  # every row of the table, in bf16
    for gib, want in (
        (random.uniform(0.2, 0.8) * 2 * whole / 2**30, None),  # a share below the table
        (random.uniform(4, 9) * whole / 2**30, whole),  # a share above it: the table
    ):
        server = EngramServerConfig(offload="dram", hot_cache_gb=gib)
        get_runtime().use_config(server)
        ours = PlacedEngramEmbedding(
            rows, layout.head_dim, layout.layer_ids[0], layout.column_bounds(0)
        )
        weight, scale = random_table(rows, layout.head_dim)
        ours.weight.weight_loader(ours.weight, weight.view(torch.float8_e4m3fn))
        ours.scale.weight_loader(ours.scale, scale.view(torch.float8_e8m0fnu))
        ours.finish_load("layer 1")
        held = ours.table.stats()["hot_cache_bytes"]
        # NOTE: the cache holds whole sets of 8 rows, so up to 8 rows less than asked
        limit = server.hot_cache_bytes // 2 if want is None else want
        assert limit - 2 * layout.head_dim * 8 < held <= limit, (held, limit)


def test_upstream_lookups_captured_in_a_cuda_graph_are_not_counted(layout, monkeypatch):
    """A CUDA-graph capture's dummy batches are no lookups of the served table: only
    eager lookups count. Stand-in for a capture on a GPU (there is none here): the
    table's lookup clock is one of a CUDA device, and torch reports a capture."""
    from sglang_engram.models.deepseek_v41.upstream_embedding import ATTR

    from engram.tables.timing import LookupClock

    get_runtime().reset()
    served = _engram(layout, monkeypatch, UPSTREAM)
    weight, scale = random_table(layout.num_embeddings[0], layout.head_dim)
    served.embed.weight.weight_loader(served.embed.weight, weight.view(torch.float8_e4m3fn))
    served.embed.scale.weight_loader(served.embed.scale, scale.view(torch.float8_e8m0fnu))
    tokens = random.randint(1, 16)
    ids = _hash_ids(layout, 0, tokens)
    rows = served.embed_rows(ids, None, False)  # eager: counted
    table = getattr(served.embed, ATTR)
    assert table.counters.stats()["rows_requested"] == ids.numel()
    monkeypatch.setattr(table, "_clock", LookupClock(torch.device("cuda")))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    captured = served.embed_rows(ids, None, False)
    assert torch.equal(captured.view(torch.int16), rows.view(torch.int16))
    counted = table.counters.stats()
    assert counted["lookups"] == 1 and counted["rows_requested"] == ids.numel()
    get_runtime().reset()


@pytest.mark.parametrize("user_layout", [None, "shared"])
@pytest.mark.parametrize("nnodes", [1, 2])
def test_dram_on_several_nodes_uses_the_per_rank_host_table(
    sglang_with_plugin, monkeypatch, layout, nnodes, user_layout
):
    """Upstream's default shared host table opens TP rank 0's memfd through /proc: a
    rank on another node cannot. On several nodes dram takes the per-rank layout
    unless the user chose one; one node keeps upstream's default."""
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    name = "SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT"
    if user_layout is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, user_layout)
    layouts = _host_table_stand_in(monkeypatch, name)
    server_args = ServerArgs(
        model_path="dummy", tp_size=2, nnodes=nnodes, node_rank=0, dist_init_addr="127.0.0.1:1"
    )
    ranks = SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0)
    args = (layout.num_embeddings[0], layout.head_dim, layout.layer_ids[0])
    get_runtime().reset()
    get_runtime().use_config(EngramServerConfig(offload="dram"))
    try:
        with use_context(create_context(server_args, role="scheduler", ranks=ranks)):
            built = PlacedEngramEmbedding(*args, column_bounds=layout.column_bounds(0))
    finally:
        get_runtime().reset()
    assert type(built) is _upstream_cls()
    chosen = user_layout or ("per_rank" if nnodes > 1 else "shared")
    assert layouts == [chosen] and os.environ.get(name) == user_layout


@pytest.mark.parametrize("offload", ["dram", "ssd"])
def test_a_rank_without_rows_of_a_small_table_serves_zeros(sglang_with_plugin, offload, tmp_path):
    """TP=4 over a 2-row table (equal split: ranks 0 and 2 own no row) with a hot cache:
    every rank starts; a rank without rows looks up zeros, and the four ranks' rows add
    up (upstream's all-reduce) to the table's."""
    from sglang.srt.layers.engram import EngramLayout, shard_range
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

    from test.plugin.tiny import tiny_config
    from test.ssd.helpers import write_checkpoint

    # NOTE: the tiny model's config.json: one SGLang loads here (DSv4.1's needs all of it)
    fields = tiny_config(layer_ids=(1, 3), n=2, heads=1, head_dim=64, vocab_start=2)
    layout = EngramLayout.from_config(SimpleNamespace(**fields))
    assert layout.num_embeddings[0] == 2
    model = tmp_path / "model"
    weight, scale = write_checkpoint(model, fields)[1]
    get_runtime().reset()
    get_runtime().use_config(
        EngramServerConfig(offload=offload, hot_cache_gb=0.001, ssd_dir=str(tmp_path / "ssd"))
    )
    args = (2, layout.head_dim, 1, layout.column_bounds(0))
    ids = torch.randint(0, 2, (random.randint(1, 30), 1))
    total = torch.zeros(*ids.shape, layout.head_dim)
    for rank in range(4):
        context = create_context(
            ServerArgs(model_path=str(model), tp_size=4, device="cpu"),
            role="scheduler",
            ranks=SpawnRanks(world_rank=rank, dp_rank=None, gpu_id=rank),
        )
        with use_context(context):
            served = PlacedEngramEmbedding(*args)
            served.weight.weight_loader(served.weight, weight.view(torch.float8_e4m3fn))
            served.scale.weight_loader(served.scale, scale.view(torch.float8_e8m0fnu))
            served.finish_load(f"layer 1 rank {rank}")
        start, end = shard_range(2, args[3], rank, 4)
        assert served.rows == end - start
        rows = served._owned_rows(ids)
        if served.rows == 0:
            assert served.table is None and not rows.any()
        total += rows.float()
    get_runtime().reset()
    want = (
        weight.view(torch.float8_e4m3fn)[ids].float().unflatten(-1, (-1, 32))
        * scale.view(torch.float8_e8m0fnu)[ids].float().unsqueeze(-1)
    ).flatten(-2)
    assert torch.equal(total, want.to(torch.bfloat16).float())
