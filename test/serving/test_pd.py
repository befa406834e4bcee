"""Prefill/decode disaggregation through real SGLang servers, real KV transfer (mooncake
over TCP) and the real sglang-router in PD mode.

One prefill server keeps Engram (``dram``); one decode server runs ``off`` and another
``dram``; a router fronts each pairing (both share the prefill server). Served tokens are
checked against the reference model teacher-forced on them: ``off`` decode is the
``prefill_only`` regime, ``dram`` decode is ``both``.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from engram_testing.client import generate_ids, metrics, post, settled_metrics
from engram_testing.reference import (
    TIE,
    Agreement,
    agreement,
    agreement_all,
    load_reference,
    random_prompts,
)
from engram_testing.server import TRANSFER, free_port, sglang_router, sglang_server
from sglang_engram.cluster.prompt_limits import longest_prompt, mismatch

from engram.eval.__main__ import main as eval_main
from engram.model import TinyEngramModel
from test.serving.markers import needs_mooncake
from test.serving.request_fuzz import fuzz_and_check, target_of

pytestmark = [pytest.mark.slow, needs_mooncake]

# NOTE: three servers start at once on a shared 2-core machine; one alone takes ~60 s.
START_S = 1800
NEW_TOKENS = 24
# NOTE: the decode-dram server's KV pool is small enough for a few concurrent requests to
# outgrow it (and reserves next to nothing per request at admission), so SGLang retracts
# some of them; one request of the other tests fits many times over.
DECODE_DRAM_KV = ("--max-total-tokens", "384", "--num-reserved-decode-tokens", "4")
ROWS = "sglang:engram_rows_requested_total"


@dataclass(frozen=True)
class Deployment:
    prefill: str
    decode_off: str
    decode_dram: str
    router_off: str  # prefill + decode_off
    router_dram: str  # prefill + decode_dram


@pytest.fixture(scope="module")
def tiny(trained_tiny_model) -> Path:
    return trained_tiny_model


@pytest.fixture(scope="module")
def reference(tiny) -> Iterator[TinyEngramModel]:
    model = load_reference(tiny)
    yield model
    model.close()


@pytest.fixture(scope="module")
def pd(tiny, tmp_path_factory) -> Iterator[Deployment]:
    logs = tmp_path_factory.mktemp("pd-logs")
    bootstrap = str(free_port())
    prefill = ("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", bootstrap)
    decode = ("--disaggregation-mode", "decode")
    servers = {
        "prefill": (*prefill, "--engram-offload", "dram"),
        "decode_off": (*decode, "--engram-offload", "off"),
        "decode_dram": (*decode, "--engram-offload", "dram", *DECODE_DRAM_KV),
    }
    with contextlib.ExitStack() as stack:
        # NOTE: the servers start side by side (each waits on its own health check);
        # the stack stops whichever started, whatever fails.
        with ThreadPoolExecutor(len(servers)) as pool:
            started = {
                name: pool.submit(
                    stack.enter_context,
                    sglang_server(
                        tiny, *args, *TRANSFER, log=logs / f"{name}.log", timeout_s=START_S
                    ),
                )
                for name, args in servers.items()
            }
            urls = {name: future.result() for name, future in started.items()}

        def router(decode: str) -> str:
            args = ("--pd-disaggregation", "--prefill", urls["prefill"], bootstrap)
            log = logs / f"router-{decode}.log"
            return stack.enter_context(
                sglang_router(*args, "--decode", urls[decode], log=log, timeout_s=START_S)
            )

        yield Deployment(**urls, router_off=router("decode_off"), router_dram=router("decode_dram"))


def _serve(url: str, prompts: list[list[int]]) -> list[list[int]]:
    return [generate_ids(url, p, NEW_TOKENS) for p in prompts]


def _agreement(model: TinyEngramModel, prompts: list, served: list, regime: str) -> Agreement:
    return agreement_all(model, prompts, served, regime)


def test_decode_off_is_the_prefill_only_regime(pd, reference):
    prompts = random_prompts(reference, 6, random.Random())
    served = _serve(pd.router_off, prompts)
    prefill_only = _agreement(reference, prompts, served, "prefill_only")
    both = _agreement(reference, prompts, served, "both")
    print(f"decode off: prefill_only {prefill_only}, both {both}")
    assert prefill_only.all_agree, prefill_only
    # Decode without Engram is not the single server's model: most tokens part ways.
    assert both.within_tie < 0.8 * both.total, both


def test_decode_dram_is_the_both_regime(pd, reference):
    prompts = random_prompts(reference, 6, random.Random())
    served = _serve(pd.router_dram, prompts)
    both = _agreement(reference, prompts, served, "both")
    print(f"decode dram: both {both}")
    assert both.all_agree, both


def _first_decode_logits(
    model: TinyEngramModel, prompt: list[int], first: int, history: torch.Tensor | None
) -> torch.Tensor:
    """Logits of the first decode step (input: ``first``, the prefill's token), its
    hasher history being the prompt's last N - 1 tokens or, given, ``history``."""
    state = model.new_state()
    model.forward(prompt, state)
    if history is not None:
        state.tail = history
    return model.forward([first], state)[-1]


def _history_sensitive_prompts(model: TinyEngramModel, n: int, rng: random.Random) -> list:
    """Prompts (with the prefill's token) whose first decode step has a different best
    token, beyond a tie, when the decode side's history is not the prompt's tail: left
    empty (hashed as pads, a sequence start) or zeros (an unwritten history slot)."""
    window = model.hasher.window - 1
    found = []
    for _ in range(2000):
        prompt = random_prompts(model, 1, rng)[0]
        logits = model.forward(prompt)[-1]
        top2 = logits.topk(2).values
        if top2[0] - top2[1] <= TIE:
            continue  # the served first token could be either
        first = int(logits.argmax())
        right = _first_decode_logits(model, prompt, first, None)
        wrong = [
            _first_decode_logits(model, prompt, first, h)
            for h in (torch.empty(0, dtype=torch.int64), torch.zeros(window, dtype=torch.int64))
        ]
        # what an unseeded decode side would serve must fail the agreement check
        if all(right.max() - right[int(w.argmax())] > TIE for w in wrong):
            found.append((prompt, first))
            if len(found) == n:
                return found
    raise AssertionError(f"found {len(found)} of {n} history-sensitive prompts")


def test_decode_history_is_seeded_from_the_prompt(pd, reference):
    """The decode server's first step hashes the prompt's last N - 1 tokens, as one
    server would: on prompts where a history of pads or zeros changes the best next
    token, the served second token is the reference's."""
    cases = _history_sensitive_prompts(reference, 4, random.Random())
    before = settled_metrics(pd.decode_dram).get(ROWS, 0)
    served = _serve(pd.router_dram, [p for p, _ in cases])
    for (prompt, first), tokens in zip(cases, served, strict=True):
        assert tokens[0] == first
        seeded = agreement(reference, prompt, tokens[:2], "both")
        assert seeded.all_agree, (prompt, tokens, seeded)
        assert agreement(reference, prompt, tokens, "both").all_agree
    # The decode server looks up rows for its own steps only (the prefill server did the
    # prompt), every column of every table: one step per token after the first, and
    # NOTE: one more per request, the overlap scheduler's step launched before the
    # last token's result shows the request finished (its output is dropped).
    cfg = reference.config
    per_token = len(cfg.engram_layer_ids) * (cfg.engram_max_ngram_size - 1) * cfg.engram_n_heads
    steps = sum(len(tokens) for tokens in served)
    assert _rows_grown(pd.decode_dram, before, steps * per_token) == steps * per_token


def _rows_grown(url: str, before: float, expected: float, timeout_s: float = 15) -> float:
    """Rows requested since ``before``, once they reach ``expected`` (the plugin folds its
    counters into /metrics once a second) or as they are at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        grown = metrics(url).get(ROWS, 0) - before
        if grown >= expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    time.sleep(2)  # a later fold would show rows beyond the expected ones
    return metrics(url).get(ROWS, 0) - before


def test_a_prefix_cache_hit_on_the_prefill_server_still_agrees(pd, reference):
    prompt = [t for p in random_prompts(reference, 2, random.Random()) for t in p]
    body = {
        "input_ids": prompt,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True},
    }
    replies = [post(pd.router_dram, "/generate", body) for _ in range(2)]
    assert [status for status, _ in replies] == [200, 200], replies
    cached = [reply["meta_info"]["cached_tokens"] for _, reply in replies]
    # the prefill server's radix cache held the whole prompt but its last token
    assert cached[1] == len(prompt) - 1 > cached[0], cached
    for _, reply in replies:
        assert agreement(reference, prompt, reply["output_ids"], "both").all_agree


def test_concurrent_requests_through_both_routers_agree(pd, reference):
    rng = random.Random()
    pairings = ((pd.router_off, "prefill_only"), (pd.router_dram, "both"))
    jobs = [(url, regime, p) for url, regime in pairings for p in random_prompts(reference, 4, rng)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        served = list(pool.map(lambda job: generate_ids(job[0], job[2], NEW_TOKENS), jobs))
    for (_, regime, prompt), tokens in zip(jobs, served, strict=True):
        assert agreement(reference, prompt, tokens, regime).all_agree, regime


def test_retracted_decode_requests_resume_and_agree(pd, reference):
    """Six requests growing to ~540 tokens in a 384-token pool: the decode server
    retracts some, keeps their KV (``cpu_tensor``, the CPU engine's default here) and
    resumes them; each completes and still agrees (its history is seeded again)."""
    rng = random.Random()
    vocab = reference.config.vocab_size
    prompts = [[rng.randrange(8, vocab) for _ in range(30)] for _ in range(6)]
    sampling = {"temperature": 0.0, "max_new_tokens": 60, "ignore_eos": True}

    def send(prompt: list[int]) -> tuple[int, dict]:
        return post(pd.router_dram, "/generate", {"input_ids": prompt, "sampling_params": sampling})

    with ThreadPoolExecutor(len(prompts)) as pool:
        replies = list(pool.map(send, prompts))
    assert [status for status, _ in replies] == [200] * len(prompts), replies
    assert sum(reply["meta_info"]["num_retractions"] for _, reply in replies) > 0
    served = [reply["output_ids"] for _, reply in replies]
    both = _agreement(reference, prompts, served, "both")
    assert both.all_agree, both


def test_a_bad_request_through_the_router_is_a_4xx_and_the_deployment_serves_on(pd, reference):
    vocab = reference.config.vocab_size
    bad = random.randrange(vocab, 10 * vocab)
    body = {"input_ids": [5, bad, 7], "sampling_params": {"max_new_tokens": 4}}
    status, reply = post(pd.router_off, "/generate", body)
    assert 400 <= status < 500, (status, reply)
    message = json.dumps(reply)
    assert str(bad) in message and f"0 to {vocab - 1}" in message, reply
    prompt = random_prompts(reference, 1, random.Random())[0]
    tokens = generate_ids(pd.router_off, prompt, NEW_TOKENS)
    assert agreement(reference, prompt, tokens, "prefill_only").all_agree


def test_ablate_url_scores_the_pd_deployment_as_prefill_only(pd, tiny, tmp_path):
    """``engram.eval ablate --url`` against the router of the decode-``off`` pairing gives
    the local ``prefill_only`` exact match on the same segments."""
    common = ["ablate", "--model", str(tiny), "--max-samples", "12", "--k", "2"]
    eval_main([*common, "--device", "cpu", "--json", str(tmp_path / "local.json")])
    eval_main([*common, "--url", pd.router_off, "--json", str(tmp_path / "remote.json")])
    local = json.loads((tmp_path / "local.json").read_text())["regimes"]
    remote = json.loads((tmp_path / "remote.json").read_text())
    assert remote["samples"] == 12
    assert remote["exact_match"] == local["prefill_only"]["exact_match"]
    assert local["both"]["exact_match"] != local["prefill_only"]["exact_match"]


@pytest.mark.parametrize("decode", ["decode_off", "decode_dram"])
def test_fuzzed_requests_through_the_router_kill_no_worker(pd, reference, decode):
    router = pd.router_off if decode == "decode_off" else pd.router_dram
    workers = (pd.prefill, getattr(pd, decode))
    prompt = random_prompts(reference, 1, random.Random(5))[0]
    vocab = reference.config.vocab_size
    target = target_of(
        f"tiny Engram model, PD prefill dram / {decode}", router, workers, vocab, prompt
    )
    summary = fuzz_and_check(target)
    assert summary["kinds_tried"] == summary["kinds_defined"] >= 40, summary


def test_a_decode_kv_pool_shorter_than_the_prefill_context_is_flagged(pd):
    prefill, small, large = (longest_prompt(u) for u in (pd.prefill, pd.decode_dram, pd.decode_off))
    assert small < prefill <= large, (small, prefill, large)
    warning = mismatch({"p0": ("prefill", prefill), "d0": ("decode", small)})
    assert f"p0 takes prompts of up to {prefill - 1} tokens but d0 only {small - 1}" in warning
    assert mismatch({"p0": ("prefill", prefill), "d1": ("decode", large)}) is None
