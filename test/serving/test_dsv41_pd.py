"""Prefill/decode disaggregation of a tiny DeepSeek-V4.1 on SGLang's CPU engine: real
servers, DeepSeek-V4's KV pages moved by mooncake over TCP, and the real sglang-router in
PD mode. The prefill worker keeps the Engram tables (``hbm``); one decode worker serves
them from ``dram``, another runs ``off``; a router fronts each pairing.

The reference is upstream's model run in-process (``engram_testing.dsv41_reference``):
decode ``dram`` gives its tokens with Engram in both phases (those of the single ``hbm``
server, which ``test_dsv41_placements_served.py`` checks against the same reference), and
decode ``off`` those with Engram in the prefill only (the first token is the prefill
worker's; the decode worker's steps add nothing).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from engram_testing import dsv41_reference
from engram_testing import dsv41_tiny_weights as tiny
from engram_testing.dsv41_tiny_checkpoint import write_tiny_checkpoint
from engram_testing.server import TRANSFER, free_port, sglang_router

from test.serving.dsv41_served import NEW_TOKENS, START_S, random_prompts, serve_all, started
from test.serving.markers import needs_mooncake
from test.serving.request_fuzz import fuzz_and_check, target_of

pytestmark = [pytest.mark.slow, needs_mooncake]


@dataclass(frozen=True)
class Deployment:
    routers: dict[str, str]  # decode worker -> the router of its pairing
    workers: dict[str, str]
    logs: Path
    prompts: list[list[int]]
    reference: dict[str, list[list[int]]]


@pytest.fixture(scope="module")
def pd(tmp_path_factory) -> Iterator[Deployment]:
    work = tmp_path_factory.mktemp("dsv41-pd")
    model = write_tiny_checkpoint(work / "tiny", seed=random.randrange(1 << 30))
    prompts = random_prompts(random.Random(), (2, 1, 1))
    bootstrap = str(free_port())
    prefill = ("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", bootstrap)
    decode = ("--disaggregation-mode", "decode")
    plans = {
        "prefill": (*prefill, *TRANSFER, "--engram-offload", "hbm"),
        "decode-dram": (*decode, *TRANSFER, "--engram-offload", "dram"),
        "decode-off": (*decode, *TRANSFER, "--engram-offload", "off"),
    }
    with ThreadPoolExecutor(1) as pool:
        reference = pool.submit(
            dsv41_reference.run, model, prompts, NEW_TOKENS, ["both", "prefill_only"], work
        )
        with started(model, plans, work) as workers, contextlib.ExitStack() as stack:
            routers = {
                name: stack.enter_context(
                    sglang_router(
                        "--pd-disaggregation",
                        "--prefill",
                        workers["prefill"],
                        bootstrap,
                        "--decode",
                        workers[name],
                        log=work / f"router-{name}.log",
                        timeout_s=START_S,
                    )
                )  # fmt: skip
                for name in ("decode-dram", "decode-off")
            }
            yield Deployment(routers, workers, work, prompts, reference.result())


def test_decode_dram_serves_what_one_server_computes(pd):
    """Every token, the decode worker's first step (its Engram hash over the transferred
    n-gram context) included; prompts within and past the sliding window and a page."""
    assert serve_all(pd.routers["decode-dram"], pd.prompts) == pd.reference["both"]


def test_decode_off_serves_the_prefill_token_then_the_model_without_engram(pd):
    tokens = serve_all(pd.routers["decode-off"], pd.prompts)
    assert tokens == pd.reference["prefill_only"]
    both = pd.reference["both"]
    assert [t[:1] for t in tokens] == [t[:1] for t in both]  # the prefill worker's
    differ = sum(
        a != b for s, e in zip(tokens, both, strict=True) for a, b in zip(s, e, strict=True)
    )
    print(f"PD, decode off, against decode dram: {differ}/{len(tokens) * NEW_TOKENS} tokens differ")
    assert differ >= len(tokens) * NEW_TOKENS // 4
    logs = {name: (pd.logs / f"{name}.log").read_text() for name in pd.workers}
    assert "Engram placement for this prefill worker: hbm" in logs["prefill"]
    assert "Engram placement for this decode worker: dram" in logs["decode-dram"]
    assert "Engram placement for this decode worker: off" in logs["decode-off"]
    assert "Engram table in off: sglang-engram's tables, nothing held" in logs["decode-off"]


def test_fuzzed_requests_through_the_router_kill_no_worker(pd):
    workers = (pd.workers["prefill"], pd.workers["decode-dram"])
    prompt = random_prompts(random.Random(5), (1, 0, 0))[0]
    target = target_of(
        "DeepSeek-V4.1, PD prefill hbm / decode dram",
        pd.routers["decode-dram"], workers, tiny.VOCAB, prompt, chat_marks_roles=True,
    )  # fmt: skip
    summary = fuzz_and_check(target)
    assert summary["kinds_tried"] == summary["kinds_defined"] >= 40, summary
