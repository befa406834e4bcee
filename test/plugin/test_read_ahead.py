"""SSD read-ahead: a queued prompt's rows, and the next decode step's rows, are read
before the lookup that needs them (the lookups take them from the prefetch)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from sglang_engram.models.deepseek_v41.row_hasher import EngramRowHasher
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig
from sglang_engram.read_ahead import ssd as read_ahead
from sglang_engram.tables import served as table_registry

from engram.fp8 import quantize_rows
from engram.hashing import NgramHasher
from engram.model.tokenizer import ASSET, tokenizer_config
from engram.spec import EngramSpec
from engram.tables import create_table
from test.plugin.tiny import engram_fields, random_token_map


def small_hasher() -> NgramHasher:
    """A random layout with small tables (the ssd tables are written for each test)."""
    fields = engram_fields(layer_ids=tuple(random.sample(range(1, 30), 2)), n=random.randint(2, 4))
    spec = EngramSpec.from_hf_config(fields)
    vocab = random.randint(spec.vocab_size, 3 * spec.vocab_size)
    return NgramHasher(spec, random_token_map(vocab, random.randint(50, spec.vocab_size)))


@pytest.fixture
def served(request: pytest.FixtureRequest, tmp_path: Path):
    """ssd tables of a random hasher's layers (behind an HBM hot cache of
    ``request.param`` bytes, if any), registered as the served ones, with dram twins
    as the oracle."""
    hot_cache_bytes = getattr(request, "param", 0)
    hasher = small_hasher()
    spec = hasher.spec
    tables, references = [], []
    get_runtime().reset()
    for i, layer in enumerate(spec.layer_ids):
        weight, scale = quantize_rows(torch.randn(spec.num_embeddings[i], spec.head_dim))
        tables.append(
            create_table(
                "ssd", weight, scale, path=tmp_path / f"l{layer}", hot_cache_bytes=hot_cache_bytes
            )
        )
        references.append(create_table("dram", weight, scale))
        table_registry.add(get_runtime().tables, layer, tables[-1])
    yield hasher, tables, references
    get_runtime().reset()
    for table in tables:
        table.close()


def _assert_rows(table, reference, ids: torch.Tensor) -> None:
    got = table.lookup(ids)
    assert torch.equal(got.view(torch.int16), reference.lookup(ids).view(torch.int16))


@pytest.mark.parametrize("served", [0, 1 << 16], indirect=True, ids=["ssd", "ssd+hot"])
def test_admitted_prompt_rows_come_from_the_prefetch(served) -> None:
    hasher, tables, references = served
    prompt = torch.randint(0, hasher.vocab_size, (200,))
    assert (
        read_ahead.read_ahead_prompt(get_runtime(), prompt.tolist()) == []
    )  # no hasher registered yet
    table_registry.set_hasher(get_runtime().tables, EngramRowHasher(hasher))
    handles = read_ahead.read_ahead_prompt(get_runtime(), prompt.tolist())
    assert len(handles) == hasher.spec.n_layers
    # NOTE: a prefill runs after its admission; a lookup reads for itself the rows of a
    # handle the read-ahead thread has not reached yet.
    assert all(h.wait(30) for h in handles)
    row_ids = hasher.hash(prompt)
    for i, (table, ref) in enumerate(zip(tables, references, strict=True)):
        _assert_rows(table, ref, row_ids[:, i])
        assert table.stats()["read_ahead_hits"] == torch.unique(row_ids[:, i]).numel()


def test_decode_steps_read_one_step_ahead(served) -> None:
    """Real SGLang requests in a real ScheduleBatch: after each step's tokens are
    sampled, the next step's rows are prefetched and the lookup takes them; the
    previous step's handle is released."""
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.sampling.sampling_params import SamplingParams

    hasher, tables, references = served
    table_registry.set_hasher(get_runtime().tables, EngramRowHasher(hasher))
    lengths = [1, 2, random.randint(3, 40), random.randint(41, 90)]
    reqs = [
        Req(f"r{k}", "", torch.randint(0, hasher.vocab_size, (n,)).tolist(), SamplingParams())
        for k, n in enumerate(lengths)
    ]
    batch = ScheduleBatch(reqs=reqs)
    # stand-ins for SGLang's Scheduler (a whole server process; the real one runs these
    # hooks in test/serving/test_placements.py): its overlap flag only
    overlapped = SimpleNamespace(enable_overlap=True)
    for req in reqs:
        req.output_ids.append(random.randrange(hasher.vocab_size))
    read_ahead.after_process_batch_result(get_runtime())(None, overlapped, batch)
    assert all(t.stats()["read_ahead_bytes_held"] == 0 for t in tables)  # would be too late
    scheduler = SimpleNamespace(enable_overlap=False)
    for step in range(4):
        for req in reqs:
            req.output_ids.append(random.randrange(hasher.vocab_size))
        before = [t.stats()["read_ahead_hits"] for t in tables]
        read_ahead.after_process_batch_result(get_runtime())(None, scheduler, batch)
        # the next decode step looks up the n-grams ending at each newest token
        row_ids = torch.stack(
            [hasher.hash(torch.tensor(r.origin_input_ids + list(r.output_ids)))[-1] for r in reqs]
        )
        for i, (table, ref) in enumerate(zip(tables, references, strict=True)):
            _assert_rows(table, ref, row_ids[:, i])
            hits = table.stats()["read_ahead_hits"] - before[i]
            assert hits == torch.unique(row_ids[:, i]).numel(), f"step {step} layer {i}"
            held = table.stats()["read_ahead_bytes_held"]
            assert held == torch.unique(row_ids[:, i]).numel() * table.row_bytes  # one handle


@pytest.mark.parametrize("threaded", [False, True], ids=["cpu-engine", "worker-thread"])
def test_overlap_scheduler_reads_one_step_ahead_from_the_launched_result(served, threaded) -> None:
    """SGLang's overlap scheduler: step k + 1 is launched before step k's result is
    processed. Real requests, batches and results (``GenerationBatchResult``, a host
    copy event); the hook on ``run_batch`` reads the rows of the n-grams ending at each
    step's sampled token, counting the tokens the scheduler has not processed yet.
    ``threaded``: the worker thread a GPU server uses (the copy is waited for there)."""
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang_engram.read_ahead import overlap

    hasher, tables, references = served
    table_registry.set_hasher(get_runtime().tables, EngramRowHasher(hasher))
    lengths = [1, random.randint(2, 40), random.randint(41, 90)]
    reqs = [
        Req(f"r{k}", "", torch.randint(0, hasher.vocab_size, (n,)).tolist(), SamplingParams())
        for k, n in enumerate(lengths)
    ]
    batch = ScheduleBatch(reqs=reqs)
    scheduler = SimpleNamespace(enable_overlap=True)  # stands in for SGLang's Scheduler
    get_runtime().read_ahead.overlap = reader = overlap.OverlapReadAhead(get_runtime(), threaded)
    sampled: list[list[int]] = []
    for step in range(5):
        batch.forward_mode = ForwardMode.EXTEND if step == 0 else ForwardMode.DECODE
        tokens = torch.randint(0, hasher.vocab_size, (len(reqs),))
        sampled.append(tokens.tolist())
        result = GenerationBatchResult(next_token_ids=tokens, copy_done=torch.cpu.Event())
        result.copy_done.record()
        before = [t.stats()["read_ahead_hits"] for t in tables]
        overlap.read_next_step(get_runtime(), result, scheduler, batch)
        reader.drain()
        if step:  # the scheduler processes the previous step only now
            for req, token in zip(reqs, sampled[step - 1], strict=True):
                req.output_ids.append(token)
        outputs = [[s[k] for s in sampled] for k in range(len(reqs))]
        windows = [r.origin_input_ids + o for r, o in zip(reqs, outputs, strict=True)]
        row_ids = torch.stack([hasher.hash(torch.tensor(w))[-1] for w in windows])
        for i, (table, ref) in enumerate(zip(tables, references, strict=True)):
            _assert_rows(table, ref, row_ids[:, i])
            hits = table.stats()["read_ahead_hits"] - before[i]
            assert hits == torch.unique(row_ids[:, i]).numel(), f"step {step} layer {i}"
    reader.close()
    # the scheduler without overlap reads ahead from process_batch_result instead
    overlap.read_next_step(get_runtime(), result, SimpleNamespace(enable_overlap=False), batch)
    assert len(reader._sampled) == len(reqs)


def test_finished_requests_are_not_read_ahead(served) -> None:
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req, ScheduleBatch
    from sglang.srt.sampling.sampling_params import SamplingParams

    hasher, tables, _ = served
    table_registry.set_hasher(get_runtime().tables, EngramRowHasher(hasher))
    req = Req("done", "", torch.randint(0, hasher.vocab_size, (9,)).tolist(), SamplingParams())
    req.output_ids.append(random.randrange(hasher.vocab_size))
    req.finished_reason = FINISH_LENGTH(length=1)
    scheduler = SimpleNamespace(enable_overlap=False)  # stands in for SGLang's Scheduler
    read_ahead.after_process_batch_result(get_runtime())(None, scheduler, ScheduleBatch(reqs=[req]))
    assert all(t.stats()["read_ahead_bytes_held"] == 0 for t in tables)


def test_a_tp_shard_reads_only_the_rows_it_holds(tmp_path: Path) -> None:
    hasher = small_hasher()
    spec = hasher.spec
    rows = spec.num_embeddings[0]
    start = random.randint(1, rows // 2)
    end = random.randint(start + 1, rows)
    weight, scale = quantize_rows(torch.randn(rows, spec.head_dim))
    shard = create_table("ssd", weight[start:end], scale[start:end], path=tmp_path / "shard")
    reference = create_table("dram", weight, scale)
    get_runtime().reset()
    try:
        table_registry.add(get_runtime().tables, spec.layer_ids[0], shard, row_start=start)
        table_registry.set_hasher(get_runtime().tables, EngramRowHasher(hasher))
        prompt = torch.randint(0, hasher.vocab_size, (300,))
        assert len(read_ahead.read_ahead_prompt(get_runtime(), prompt.tolist())) == 1
        ids = hasher.hash(prompt)[:, 0].reshape(-1)
        owned = ids[(ids >= start) & (ids < end)]
        got = shard.lookup(owned - start)
        assert torch.equal(got.view(torch.int16), reference.lookup(owned).view(torch.int16))
        assert shard.stats()["read_ahead_hits"] == torch.unique(owned).numel()
    finally:
        get_runtime().reset()
        shard.close()


@pytest.mark.parametrize(("offload", "prefetch"), [("ssd", True), ("dram", True), ("ssd", False)])
def test_dsv4_model_hands_its_hash_constants_to_the_read_ahead(
    cpu_context, tmp_path: Path, offload: str, prefetch: bool
) -> None:
    """Once SGLang has loaded a DeepSeek-V4.1 model, the shared hook asks its family for
    the read-ahead's hash: upstream's EngramHasher (built from a tokenizer) becomes our
    NgramHasher, hashing prompts bit-exactly as upstream does. The loaded model stands in
    for DeepseekV4ForCausalLM (a full DeepSeek-V4.1 model, not built here): the module
    holding upstream's hasher and config, as DeepseekV4Model does."""
    from sglang.srt.layers.engram import EngramHasher, EngramLayout, build_compressed_token_map
    from sglang_engram.read_ahead.ssd import after_load_model
    from transformers import AutoTokenizer

    (tmp_path / "tokenizer.json").write_bytes(ASSET.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(4096)))
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    _, compressed = build_compressed_token_map(tokenizer)
    fields = engram_fields(layer_ids=(1, 14), n=4, heads=8, head_dim=64)
    config = SimpleNamespace(**fields, engram_compressed_vocab_size=compressed)
    layout = EngramLayout.from_config(config)
    upstream = EngramHasher(layout, tokenizer, config.engram_pad_token_id, compressed)
    dsv4 = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", **fields}
    (tmp_path / "config.json").write_text(json.dumps(dsv4))
    server = EngramServerConfig(offload=offload, prefetch=prefetch)
    get_runtime().reset()
    get_runtime().use_config(server)
    try:
        holder = SimpleNamespace(engram_hasher=upstream, config=config)
        runner = SimpleNamespace(
            is_draft_worker=False,
            model_config=SimpleNamespace(model_path=str(tmp_path)),
            model=SimpleNamespace(modules=lambda: [SimpleNamespace(), holder]),
        )
        after_load_model(get_runtime())(None, runner)
        ours = table_registry.hasher(get_runtime().tables)
        if offload != "ssd" or not prefetch:
            assert ours is None  # nothing to read ahead
            return
        prompt = torch.randint(0, len(tokenizer), (random.randint(1, 64),))
        n = layout.max_ngram_size
        shifts = torch.arange(n)
        positions = torch.arange(prompt.numel())
        blocked = positions.unsqueeze(1) < shifts
        windows = prompt[(positions.unsqueeze(1) - shifts).clamp_min(0)]
        want, _ = upstream.hash_windows(windows, blocked)
        assert torch.equal(ours.prompt_rows(prompt.tolist()), want)
    finally:
        get_runtime().reset()


def test_admission_hook_reads_what_the_prefill_will_look_up(served) -> None:
    """Real SGLang requests; the scheduler objects stand in for SGLang's Scheduler (a
    whole server process; test/serving runs the real one) and carry only its
    disaggregation mode."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    hasher, tables, _ = served
    table_registry.set_hasher(get_runtime().tables, EngramRowHasher(hasher))
    prompt = torch.randint(0, hasher.vocab_size, (random.randint(20, 80),)).tolist()
    req = Req("r", "", prompt, SamplingParams())
    decode_worker = SimpleNamespace(disaggregation_mode=DisaggregationMode.DECODE)
    read_ahead.after_add_request_to_queue(get_runtime())(None, decode_worker, req)
    assert all(t.stats()["read_ahead_bytes_held"] == 0 for t in tables)
    # a retracted request re-prefills its prompt and the outputs it had
    req.output_ids.extend(torch.randint(0, hasher.vocab_size, (7,)).tolist())
    single = SimpleNamespace(disaggregation_mode=DisaggregationMode.NULL)
    read_ahead.after_add_request_to_queue(get_runtime())(None, single, req)
    row_ids = hasher.hash(torch.tensor(prompt + list(req.output_ids)))
    for i, table in enumerate(tables):
        table.lookup(row_ids[:, i])
        assert table.stats()["read_ahead_hits"] == torch.unique(row_ids[:, i]).numel()


def test_a_prompts_read_ahead_is_released_once_its_prefill_ran(served) -> None:
    """Real SGLang requests in a real ScheduleBatch; the scheduler object stands in for
    SGLang's Scheduler and carries only its disaggregation and overlap modes. The
    handles a request took at admission live until the extend batch that ends its
    prefill has run; a request with chunks still to run keeps them."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang_engram.integration import run_batch

    hasher, tables, references = served
    table_registry.set_hasher(get_runtime().tables, EngramRowHasher(hasher))
    scheduler = SimpleNamespace(disaggregation_mode=DisaggregationMode.NULL)
    reqs = [
        Req(f"r{k}", "", torch.randint(0, hasher.vocab_size, (random.randint(9, 60),)).tolist(), SamplingParams())
        for k in range(3)
    ]  # fmt: skip
    for req in reqs:
        read_ahead.after_add_request_to_queue(get_runtime())(None, scheduler, req)
    n_layers = hasher.spec.n_layers
    assert all(len(vars(r)[read_ahead.PROMPT_HANDLES]) == n_layers for r in reqs)
    chunked = reqs[1]
    chunked.is_chunked = 1
    batch = ScheduleBatch(reqs=reqs)
    batch.forward_mode = ForwardMode.DECODE
    assert (
        read_ahead.release_prefilled(get_runtime(), batch) == 0
    )  # a decode batch prefills nothing
    batch.forward_mode = ForwardMode.EXTEND
    scheduler.enable_overlap = False
    run_batch.after_run_batch(get_runtime())(
        None, scheduler, batch
    )  # the plugin's hook on run_batch
    assert all(read_ahead.PROMPT_HANDLES not in vars(r) for r in (reqs[0], reqs[2]))
    kept = vars(chunked)[read_ahead.PROMPT_HANDLES]
    assert all(h.wait(30) and h.nbytes > 0 for h in kept)  # read: its size is settled
    assert [t.stats()["read_ahead_bytes_held"] for t in tables] == [h.nbytes for h in kept]
    # its last chunk runs: released too; its rows read again are the same rows
    chunked.is_chunked = 0
    assert read_ahead.release_prefilled(get_runtime(), batch) == n_layers
    assert all(t.stats()["read_ahead_bytes_held"] == 0 for t in tables)
    row_ids = hasher.hash(torch.tensor(chunked.origin_input_ids))
    for i, (table, ref) in enumerate(zip(tables, references, strict=True)):
        _assert_rows(table, ref, row_ids[:, i])
