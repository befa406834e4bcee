"""A tiny DeepSeek-V4.1 (``deepseek_v41``) served by real SGLang on its CPU engine, upstream's
``DeepseekV4ForCausalLM`` with its DeepSeek-V4 pool and attention backend, the CUDA-only ops
as the plugin's stand-ins, in every ``--engram-offload`` placement: five servers, started
at once and shared by the tests, beside an in-process reference of upstream's model.

- ``hbm``: upstream's own ``EngramEmbedding`` (the oracle). Its greedy tokens are the
  reference's (upstream's model run in-process by SGLang's one-batch driver).
- ``dram`` behind the HBM hot cache (our tables), ``ssd`` (ours, converted on first start,
  a RAM cache of half the rows, prefilling ``CHUNK`` tokens at a time) and ``ssd`` seeded
  from ``python -m engram.profile`` with the hot cache, writing its served profile: the
  same tokens as ``hbm``, every one, for prompts within and past the sliding window.
- ``off``: the tokens of the reference with Engram's contribution taken away (every
  Engram ``wkv`` zero: upstream's gate then adds exact zeros).

``dram`` without the hot cache is upstream's table in host memory, as on ``hbm`` here; the
PD module serves it (``test_dsv41_pd.py``).
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from engram_testing import dsv41_reference
from engram_testing import dsv41_tiny_weights as tiny
from engram_testing.client import flush_prefix_cache, metrics, post, settled_metrics
from engram_testing.dsv41_tiny_checkpoint import write_tiny_checkpoint
from engram_testing.profile_cli import run_profile
from sglang_engram.integration.kernel_standin.dsv4 import DSV4_STANDINS

from engram.files import GIB
from engram.model.corpus import split_documents, stdlib_documents
from engram.profile import RowProfile
from engram.rows.seed_rows import fitting
from engram.spec import EngramSpec
from engram.ssd.row_cache import RowCache
from test.serving.dsv41_served import CHUNK, NEW_TOKENS, random_prompts, serve_all, started
from test.serving.request_fuzz import fuzz_and_check, target_of

pytestmark = pytest.mark.slow

# NOTE: the tiny tables are ~0.8 MiB each: a RAM cache of half the rows, a hot cache of
# about a third, so that both choose
RAM_CACHE_GB = "0.0008"
HOT_CACHE_GB = "0.0005"
SEED_RAM_CACHE_GB = "0.0004"
ROWS = "sglang:engram_rows_requested_total"
SEEDED = "sglang:engram_ssd_seeded_rows_total"
SERVED_BY = "DeepSeek-V4.1's Engram tables served by"


@dataclass(frozen=True)
class Module:
    checkpoint: Path
    spec: EngramSpec
    urls: dict[str, str]
    logs: Path
    ssd_dirs: dict[str, Path]
    profile: Path
    served_profile: Path
    prompts: list[list[int]]
    reference: dict[str, list[list[int]]]


def _profile(checkpoint: Path, folder: Path, out: Path) -> None:
    """``python -m engram.profile`` of the checkpoint over held-out stdlib text."""
    folder.mkdir()
    docs = split_documents(stdlib_documents(), "heldout")
    for i, doc in enumerate(d for d in docs if len(d.text) > 2000):
        (folder / f"doc{i}.txt").write_text(doc.text)
    done = run_profile(str(checkpoint), str(folder), "--out", str(out))
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Module:
    work = tmp_path_factory.mktemp("dsv41")
    checkpoint = write_tiny_checkpoint(work / "tiny", seed=random.randrange(1 << 30))
    spec = EngramSpec.from_hf_config(json.loads((checkpoint / "config.json").read_text()))
    ssd_dirs = {name: work / f"ssd-{name}" for name in ("ssd", "ssd-seeded")}
    profile, served_profile = work / "stdlib.npz", work / "served.npz"
    prompts = random_prompts(random.Random(), (3, 3, 2))
    ssd = ("--engram-offload", "ssd", "--engram-ssd-dir")
    plans = {
        "hbm": ("--engram-offload", "hbm"),
        "dram-hot": ("--engram-offload", "dram", "--engram-hot-cache-gb", HOT_CACHE_GB),
        "ssd": (*ssd, str(ssd_dirs["ssd"]), "--engram-ram-cache-gb", RAM_CACHE_GB,
                "--chunked-prefill-size", str(CHUNK)),
        "ssd-seeded": (*ssd, str(ssd_dirs["ssd-seeded"]), "--engram-ram-cache-gb",
                       SEED_RAM_CACHE_GB, "--engram-hot-cache-gb", HOT_CACHE_GB,
                       "--engram-seed-profile", str(profile),
                       "--engram-profile-out", str(served_profile)),
        "off": ("--engram-offload", "off"),
    }  # fmt: skip
    before = {"ssd-seeded": lambda: _profile(checkpoint, work / "corpus", profile)}
    with ThreadPoolExecutor(1) as pool:
        reference = pool.submit(
            dsv41_reference.run, checkpoint, prompts, NEW_TOKENS, ["both", "none"], work
        )
        with started(checkpoint, plans, work, before) as urls:
            yield Module(
                checkpoint, spec, urls, work, ssd_dirs, profile, served_profile, prompts,
                reference.result(),
            )  # fmt: skip


def _log(served: Module, name: str) -> str:
    return (served.logs / f"{name}.log").read_text()


@pytest.fixture(scope="module")
def hbm_tokens(served) -> list[list[int]]:
    begin = time.monotonic()
    tokens = serve_all(served.urls["hbm"], served.prompts)
    elapsed = time.monotonic() - begin
    print(f"hbm: {len(tokens) * NEW_TOKENS / elapsed:.1f} tok/s one request at a time")
    return tokens


def test_hbm_serves_upstreams_model_token_for_token(served, hbm_tokens):
    tokens = hbm_tokens
    assert tokens == served.reference["both"]
    # not degenerate: continuations of their own, many distinct tokens
    assert len({tuple(t) for t in tokens}) == len(tokens)
    assert len({t for seq in tokens for t in seq}) > len(tokens) * NEW_TOKENS // 2
    log = _log(served, "hbm")
    for op in DSV4_STANDINS:
        if op != "SetKAndS":  # the pack store: PD transfer and tests, not a forward
            assert f"DeepSeek-V4's {op} runs as a plain-torch STAND-IN" in log, op
    for change in ("SGLANG_OPT_USE_TILELANG_MHC_PRE=0", "--kv-cache-dtype bfloat16",
                   "--swa-full-tokens-ratio 0.5", "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL=0"):  # fmt: skip
        assert f"DeepSeek-V4.1: CPU engine: {change}" in log, change


@pytest.mark.parametrize("placement", ["dram-hot", "ssd", "ssd-seeded"])
def test_placement_serves_hbms_tokens(served, hbm_tokens, placement):
    assert serve_all(served.urls[placement], served.prompts) == hbm_tokens


def test_off_serves_upstreams_model_without_engram(served):
    tokens = serve_all(served.urls["off"], served.prompts)
    assert tokens == served.reference["none"]
    differ = sum(
        a != b
        for o, e in zip(tokens, served.reference["both"], strict=True)
        for a, b in zip(o, e, strict=True)
    )
    print(f"off against hbm: {differ}/{len(tokens) * NEW_TOKENS} tokens differ")
    assert differ >= len(tokens) * NEW_TOKENS // 4
    assert not any(k.startswith(ROWS) and v for k, v in metrics(served.urls["off"]).items())


def test_logs_name_placement_code_and_skipped_tables(served):
    upstream = "upstream SGLang's EngramEmbedding"
    code = {
        "hbm": f"{upstream} (device table)",
        "dram-hot": "sglang-engram's tables",
        "ssd": "sglang-engram's tables",
        "off": "sglang-engram's tables",
    }
    tables = 2 * len(served.spec.layer_ids)
    for name, who in code.items():
        log = _log(served, name)
        placement = name.removesuffix("-hot")
        assert f"Engram placement for this single server: {placement}" in log, name
        assert f"{SERVED_BY} {who}" in log, name
        # ssd and off never read the table tensors; hbm and dram load them
        skipped = f"sglang-engram: left {tables} table tensors unread" in log
        assert skipped == (name in ("ssd", "off")), name
    assert _log(served, "off").count("--engram-offload off on a single server: ") == 1


def test_ssd_reads_ahead_the_rows_the_model_looks_up(served):
    """The read-ahead hashes each admitted prompt and each sampled token with the family's
    row hasher (upstream's token map and layout in the core library's hash; checked
    against upstream's hash in ``test_dsv41_tiny_checkpoint``): the lookups find their rows
    in read-ahead handles, and the RAM cache and read-ahead counters move."""
    url, spec = served.urls["ssd"], served.spec
    prompts = random_prompts(random.Random(), (2, 1, 1))
    flush_prefix_cache(url)
    before = settled_metrics(url, labelled=True)
    serve_all(url, prompts)
    # each request looks up its prompt, then every new token but the last, at every layer
    rows = sum(len(p) + NEW_TOKENS - 1 for p in prompts) * spec.n_cols
    keys = [f"{ROWS}{{layer={layer}}}" for layer in spec.layer_ids]
    after = settled_metrics(url, True, {k: before.get(k, 0) + rows for k in keys})

    def grown(name: str) -> float:
        return sum(
            after.get(f"{name}{{layer={layer}}}", 0) - before.get(f"{name}{{layer={layer}}}", 0)
            for layer in spec.layer_ids
        )

    assert all(after[k] - before.get(k, 0) == rows for k in keys), (before, after)
    requested = rows * spec.n_layers
    from_disk = grown("sglang:engram_ssd_lookup_rows_read_total")
    from_ahead = grown("sglang:engram_ssd_prefetch_hits_total")
    print(f"ssd: of {requested} rows looked up, {from_ahead:.0f} from read-ahead, "
          f"{from_disk:.0f} read by the lookups")  # fmt: skip
    # NOTE: a lookup that comes before the read-ahead reached its rows reads them itself
    # (a long prompt's handle reads slice by slice); rows hashed wrong would all be read so
    assert from_ahead >= 0.5 * requested and from_disk <= 0.05 * requested
    assert grown("sglang:engram_ssd_ahead_rows_read_total") > 0
    probes = [f"sglang:engram_ssd_ram_cache_{p}_ahead_{r}_total" for p in ("prompt", "decode") for r in ("hits", "misses")]  # fmt: skip
    assert sum(grown(name) for name in probes) > 0
    assert f"#new-token: {CHUNK}," in _log(served, "ssd")  # prefilled chunk by chunk
    on_disk = sum(p.stat().st_size for p in served.ssd_dirs["ssd"].rglob("rows.bin"))
    assert after["sglang:engram_table_bytes{tier=ssd}"] == on_disk > 0


def test_dram_hot_cache_serves_rows_from_the_hot_tier(served):
    url = served.urls["dram-hot"]
    before = settled_metrics(url, labelled=True)
    serve_all(url, served.prompts[:2], 8)
    after = settled_metrics(url, labelled=True)
    hot = "sglang:engram_bytes_read_total{tier=hbm}"
    assert after.get(hot, 0) > before.get(hot, 0)
    assert after["sglang:engram_table_bytes{tier=dram}"] > 0


def test_seeded_ssd_holds_the_profiles_rows_and_writes_its_own(served):
    spec, url = served.spec, served.urls["ssd-seeded"]
    ranked = RowProfile.load(served.profile).rows
    share = int(float(SEED_RAM_CACHE_GB) * GIB) // spec.n_layers
    wants = {}
    for index, layer in enumerate(spec.layer_ids):
        cache = RowCache(min(share, spec.table_bytes(index)), spec.row_bytes)
        fit = fitting(ranked[layer], cache.n_sets, cache.ways)
        assert 0 < fit.size < ranked[layer].size  # the seed chose
        wants[f"{SEEDED}{{layer={layer}}}"] = fit.size
    now = settled_metrics(url, labelled=True, wants=wants, timeout_s=120)
    assert {k: now.get(k) for k in wants} == wants
    assert now["sglang:engram_table_bytes{tier=hbm}"] > 0  # the hot cache in front
    # the served profile counts exactly the rows the lookups requested so far
    totals = {layer: int(now[f"{ROWS}{{layer={layer}}}"]) for layer in spec.layer_ids}
    deadline = time.monotonic() + 60
    while True:
        if served.served_profile.exists():
            written = RowProfile.load(served.served_profile)
            got = {layer: int(np.sum(c)) for layer, c in written.counts.items()}
            if got == totals:
                break
        assert time.monotonic() < deadline, (totals, served.served_profile)
        time.sleep(0.5)
    assert all(t > 0 for t in totals.values())


def test_request_guard_knows_the_vocabulary_and_the_chat_tokens(served):
    url = served.urls["ssd"]
    for ids, want in (([5, tiny.VOCAB], 400), ([5, tiny.VOCAB - 1], 200), ([-1, 5], 400)):
        status, body = post(
            url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}
        )
        assert status == want, (ids, body)
        if want == 400:
            assert "input_ids" in json.dumps(body), body
    status, body = post(
        url,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "def main("}], "max_tokens": 4},
    )
    assert status == 200, body


def test_fuzzed_requests_are_refused_or_served_and_never_kill_the_server(served):
    url = served.urls["ssd"]
    prompt = random_prompts(random.Random(5), (1, 0, 0))[0]
    target = target_of("DeepSeek-V4.1, ssd", url, (url,), tiny.VOCAB, prompt, True)
    summary = fuzz_and_check(target)
    assert summary["kinds_tried"] == summary["kinds_defined"] >= 40, summary
