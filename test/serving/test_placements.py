"""The main job, through real SGLang: ``python -m sglang.launch_server --engram-offload P``
with the plugin loaded, on a GPU or on this CPU (SGLang's CPU engine), one server per
placement shared by the module's tests.

Served tokens are checked against the reference model teacher-forced on the server's
own tokens (``reference.agreement``); ``/metrics`` against counts derived from the
requests sent.
"""

from __future__ import annotations

import contextlib
import json
import random
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from engram_testing.client import flush_prefix_cache, generate_ids, metrics, post, settled_metrics
from engram_testing.plain import total_table_bytes
from engram_testing.reference import agreement, agreement_all, load_reference, random_prompts
from engram_testing.server import sglang_server
from sglang_engram.protocol.server_config import engram_flags

from engram.eval import REGIMES, Sample, ablate
from engram.eval.remote import remote_exact_match
from engram.placements import placement_named
from engram.spec import EngramSpec
from test.serving.request_fuzz import fuzz_and_check, target_of, walk_away

pytestmark = pytest.mark.slow

NEW_TOKENS = 24
ROWS = "sglang:engram_rows_requested_total"


@pytest.fixture(scope="module")
def tiny(trained_tiny_model) -> Path:
    return trained_tiny_model


@pytest.fixture(scope="module")
def reference(tiny):
    model = load_reference(tiny)
    yield model
    model.close()


@pytest.fixture(scope="module")
def spec(tiny) -> EngramSpec:
    return EngramSpec.from_hf_config(json.loads((tiny / "config.json").read_text()))


@pytest.fixture(scope="module")
def ssd_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ssd")


@dataclass(frozen=True)
class Served:
    placement: str
    url: str
    log: Path


PLACEMENTS = ("hbm", "dram", "ssd", "off")


@pytest.fixture(scope="module")
def servers(tiny, ssd_dir, tmp_path_factory) -> Iterator[dict[str, Served]]:
    """One server per placement, started at once and shared by the module's tests.

    NOTE: ~3.5 GB of host memory each on the CPU engine: four at once (and the one
    ``test_ssd_tables_are_reused_on_the_next_start`` adds) fit a 24 GiB machine; their
    starts overlap, where one after another would leave a core idle through each."""
    logs = tmp_path_factory.mktemp("logs")
    # NOTE: the tiny model has no chat template; with this one, /v1/chat/completions
    # requests reach the model (and the request guard: empty content is an empty prompt)
    template = logs / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")

    def start(stack: contextlib.ExitStack, placement: str) -> Served:
        files = placement_named(placement).files
        flags = engram_flags(offload=placement, ssd_dir=str(ssd_dir) if files else None)
        log = logs / f"{placement}.log"
        server = sglang_server(tiny, *flags, "--chat-template", str(template), log=log)
        return Served(placement, stack.enter_context(server), log)

    with contextlib.ExitStack() as stack, ThreadPoolExecutor(len(PLACEMENTS)) as pool:
        futures = {p: pool.submit(start, stack, p) for p in PLACEMENTS}
        yield {p: future.result() for p, future in futures.items()}


@pytest.fixture(scope="module")
def server(request, servers) -> Served:
    """The server of the placement the test names (``indirect`` parametrization)."""
    return servers[request.param]


def placements(*names: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("server", names, indirect=True)


def _served(url: str, prompts: list[list[int]]) -> list[list[int]]:
    return [generate_ids(url, p, NEW_TOKENS) for p in prompts]


def _served_whole(url: str, prompts: list[list[int]]) -> list[list[int]]:
    """``_served`` with the prefix cache emptied first: every prompt token is looked up."""
    flush_prefix_cache(url)
    return _served(url, prompts)


@placements("hbm", "dram", "ssd")
def test_every_placement_serves_the_reference_model(server, reference):
    placement = server.placement
    prompts = random_prompts(reference, 5, random.Random())
    served = _served(server.url, prompts)
    agree = agreement_all(reference, prompts, served, "both")
    assert agree.all_agree, (placement, agree)
    assert f"placement for this single server: {placement}" in server.log.read_text()


@placements("off")
def test_off_serves_the_model_without_engram(server, reference):
    prompts = random_prompts(reference, 5, random.Random())
    served = _served(server.url, prompts)
    without = agreement_all(reference, prompts, served, "none")
    with_engram = agreement_all(reference, prompts, served, "both")
    assert without.all_agree, without
    # the Engram layers change the model: most tokens then disagree
    assert with_engram.within_tie < 0.8 * with_engram.total, with_engram
    assert not any(k.startswith(ROWS) and v for k, v in metrics(server.url).items())


def _rows_after(url: str, before: dict, spec: EngramSpec, prompts: list[list[int]]) -> dict:
    """/metrics once the rows of serving ``prompts`` are all counted: each request looks up
    its prompt, then every new token but the last, at every Engram layer, (N - 1) * H
    rows per token."""
    tokens = sum(len(p) + NEW_TOKENS - 1 for p in prompts)
    keys = [f"{ROWS}{{layer={layer}}}" for layer in spec.layer_ids]
    return settled_metrics(url, True, {k: before.get(k, 0) + tokens * spec.n_cols for k in keys})


def _sum(values: dict, name: str) -> float:
    """``name`` summed over its labels."""
    return sum(v for k, v in values.items() if k == name or k.startswith(name + "{"))


@placements("hbm", "dram", "ssd")
def test_metrics_count_the_rows_each_request_looks_up(server, reference, spec):
    url, placement = server.url, server.placement
    prompts = random_prompts(reference, 3, random.Random())
    before = settled_metrics(url, labelled=True)
    _served_whole(url, prompts)
    after = _rows_after(url, before, spec, prompts)
    tokens = sum(len(p) + NEW_TOKENS - 1 for p in prompts)
    for layer in spec.layer_ids:
        key = f"{ROWS}{{layer={layer}}}"
        assert after[key] - before.get(key, 0) == tokens * spec.n_cols
    unique, read = (
        _sum(after, name) - _sum(before, name)
        for name in ("sglang:engram_unique_rows_total", "sglang:engram_bytes_read_total")
    )
    assert 0 < unique <= 2 * tokens * spec.n_cols
    assert read == unique * spec.row_bytes
    table = total_table_bytes(spec)
    held = {
        tier: after.get(f"sglang:engram_table_bytes{{tier={tier}}}", 0)
        for tier in ("hbm", "dram", "ssd")
    }
    if placement == "ssd":
        assert held["ssd"] >= table
        # the RAM row cache is no larger than its table, whatever the 4 GiB default
        assert held["dram"] < 2 * table, held
        assert held["hbm"] == 0
    else:
        assert held[placement] == table
        assert sum(held.values()) == table
    lookups = "sglang:engram_lookup_seconds_count"
    assert after.get(lookups, 0) > before.get(lookups, 0)


@placements("ssd")
def test_ssd_ram_cache_and_read_ahead_are_counted(server, reference, spec):
    url = server.url
    prompts = random_prompts(reference, 3, random.Random())
    before = settled_metrics(url, labelled=True)
    served = _served_whole(url, prompts)
    after = _rows_after(url, before, spec, prompts)

    def grown(name: str, since: dict = before, to: dict = after) -> float:
        return _sum(to, name) - _sum(since, name)

    unique = grown("sglang:engram_unique_rows_total")
    hits, misses = (grown(f"sglang:engram_ssd_ram_cache_{k}_total") for k in ("hits", "misses"))
    prefetched = grown("sglang:engram_ssd_prefetch_hits_total")
    # prompts are read ahead at admission, so lookups take rows the read-ahead holds
    assert 0 < prefetched <= unique
    # and so are decode steps, one step ahead, under SGLang's default overlap scheduler:
    # beyond the prompts' own rows (the most admission gives), a good share of the rows
    # the decode steps look up came from the read-ahead
    prompt_rows = sum(
        torch.unique(reference.hasher.hash(torch.tensor(p))[:, k]).numel()
        for p in prompts
        for k in range(spec.n_layers)
    )
    decode_rows = len(prompts) * (NEW_TOKENS - 1) * spec.n_layers * spec.n_cols
    assert prefetched - prompt_rows > decode_rows / 4, (prefetched, prompt_rows, decode_rows)
    # every other distinct row of a lookup is looked for in the RAM cache, once (the
    # read-ahead's own probes are not counted): never more than the rows requested
    assert unique - prefetched <= hits + misses <= unique
    assert grown("sglang:engram_ssd_io_errors_total") == 0
    # the same prompt again: the RAM cache (as large as the table) holds every row read
    # so far, so only rows of n-grams the first pass never looked up come from the disk
    # (none when greedy decoding repeats itself). NOTE: whether the read-ahead or the
    # lookup finds them in RAM depends on timing, so the disk reads are what is asserted
    replay = _served_whole(url, prompts[:1])
    again = _rows_after(url, after, spec, prompts[:1])

    def rows(seqs: list[list[int]]) -> set[tuple[int, int]]:
        hashed = [reference.hasher.hash(torch.tensor(s)) for s in seqs]
        return {
            (k, int(r)) for h in hashed for k in range(spec.n_layers) for r in h[:, k].flatten()
        }

    looked_up = rows([p + out[:-1] for p, out in zip(prompts, served, strict=True)])
    new_rows = rows([prompts[0] + replay[0][:-1]]) - looked_up
    disk = sum(
        grown(f"sglang:engram_ssd_{by}_rows_read_total", after, again) for by in ("lookup", "ahead")
    )
    assert disk <= len(new_rows), (disk, len(new_rows))
    assert grown("sglang:engram_rows_requested_total", after, again) > 0


@placements("ssd")
def test_ssd_tables_are_reused_on_the_next_start(server, tiny, ssd_dir, reference, tmp_path):
    prompts = random_prompts(reference, 2, random.Random())
    _served(server.url, prompts)
    stamp = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in ssd_dir.rglob("rows.bin")}
    assert len(stamp) == 2
    args = ("--engram-offload", "ssd", "--engram-ssd-dir", str(ssd_dir))
    with sglang_server(tiny, *args, log=tmp_path / "second.log") as url:
        again = _served(url, prompts)
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in ssd_dir.rglob("rows.bin")} == stamp
    agree = agreement_all(reference, prompts, again, "both")
    assert agree.all_agree, agree


@placements("dram")
def test_bad_token_ids_get_a_400_and_the_server_goes_on(server, reference):
    url = server.url
    vocab = reference.config.vocab_size
    for bad in (vocab, vocab + random.randrange(1, 10**6), -random.randrange(1, 100)):
        ids = [random.randrange(8, vocab) for _ in range(5)]
        at = random.randrange(len(ids))
        ids[at] = bad
        status, body = post(
            url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 4}}
        )
        assert status == 400, body
        message = json.dumps(body)
        assert f"input_ids[{at}] is {bad}" in message and f"0 to {vocab - 1}" in message
    status, body = post(
        url, "/generate", {"input_ids": [5] * 5000, "sampling_params": {"max_new_tokens": 4}}
    )
    assert status == 400 and "context length" in json.dumps(body)
    prompt = random_prompts(reference, 1, random.Random())[0]
    assert agreement(reference, prompt, generate_ids(url, prompt, NEW_TOKENS)).all_agree


def _target(server: Served, reference):
    prompt = random_prompts(reference, 1, random.Random(5))[0]
    url = server.url
    return target_of(
        f"tiny Engram model, {server.placement}", url, (url,), reference.config.vocab_size, prompt
    )


@placements("hbm", "dram", "ssd")
def test_fuzzed_requests_are_refused_or_served_and_never_kill_the_server(server, reference):
    summary = fuzz_and_check(_target(server, reference))
    assert summary["kinds_tried"] == summary["kinds_defined"] >= 40, summary


@placements("dram")
def test_clients_that_go_away_free_their_slots(server, reference):
    walk_away(_target(server, reference), streams=3, aborts=6)


@placements("dram")
def test_concurrent_and_streamed_requests_agree(server, reference):
    url = server.url
    prompts = random_prompts(reference, 16, random.Random())
    with ThreadPoolExecutor(16) as pool:
        served = list(pool.map(lambda p: generate_ids(url, p, NEW_TOKENS), prompts))
    agree = agreement_all(reference, prompts, served)
    assert agree.all_agree, agree
    chunks, ids = _stream(url, prompts[0])
    assert chunks > 1
    assert agreement(reference, prompts[0], ids).all_agree


def _stream(url: str, prompt: list[int]) -> tuple[int, list[int]]:
    """(chunks received, output ids) of a streamed greedy request."""
    body = {
        "input_ids": prompt,
        "stream": True,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True},
    }
    req = urllib.request.Request(
        f"{url}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    chunks, last = 0, {}
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data:") and line != "data: [DONE]":
                chunks += 1
                last = json.loads(line[len("data:") :])
    return chunks, list(last["output_ids"])


def _eval_samples(model, n_both: int, n_none: int, k: int, rng: random.Random) -> list[Sample]:
    """Prompts of fresh random ids, continued by the reference's own greedy tokens with
    Engram on (``n_both``) or off (``n_none``); no continuation ends early."""
    out = []
    while len(out) < n_both + n_none:
        prompt = [rng.randrange(3, model.config.vocab_size) for _ in range(rng.randint(6, 24))]
        on = len(out) < n_both
        cont = model.generate(prompt, k, prefill_engram=on, decode_engram=on)
        if len(cont) == k and model.config.eos_token_id not in cont:
            out.append(Sample(prompt, cont))
    return out


def test_eval_url_mode_scores_what_each_server_decodes(servers, reference):
    """``engram.eval ablate --url``: a dram server decodes as the local ``both`` regime, an
    off server as ``none`` (PD decode workers running off, ``prefill_only``: the PD tests).

    A server's bf16 kernels may break an exact logit tie the other way than the reference
    does, so each server's greedy tokens are first checked against the reference,
    teacher-forced; then ``--url``'s score must be the share of samples the server's tokens
    match, and the local score may differ from it only by samples on which the server's
    path and the reference's greedy path part."""
    k = 6
    samples = _eval_samples(reference, 5, 3, k, random.Random())
    local = ablate(reference, samples, k, {r: REGIMES[r] for r in ("both", "none")}).regimes
    # 5 samples are both's greedy path, 3 none's, and the regimes' paths part.
    assert local["both"].exact_match > local["none"].exact_match
    for placement, regime in (("dram", "both"), ("off", "none")):
        url = servers[placement].url
        served = [generate_ids(url, s.prompt, k) for s in samples]
        for s, ids in zip(samples, served, strict=True):
            a = agreement(reference, s.prompt, ids, regime)
            assert a.all_agree, f"{placement} server vs {regime}: {a}"
        matched = [ids == s.continuation for s, ids in zip(samples, served, strict=True)]
        remote = remote_exact_match(url, samples, k).exact_match
        assert remote == pytest.approx(sum(matched) / len(samples)), placement
        on = REGIMES[regime]
        parted = sum(
            ids
            != reference.generate(s.prompt, k, prefill_engram=on.prefill, decode_engram=on.decode)
            for s, ids in zip(samples, served, strict=True)
        )
        gap = abs(remote - local[regime].exact_match) * len(samples)
        assert gap <= parted + 1e-9, (placement, remote, local[regime], parted)
        assert parted <= len(samples) // 2, f"{placement}: ties on {parted} samples"
