"""Prefill/decode disaggregation of a tiny random Qwen3.8-Flash-Next (``qwen4_exp``) on
SGLang's CPU engine: real servers, real KV and state transfer (mooncake over TCP: the
paged KV cache, the Gated DeltaNet conv and recurrent states, and upstream's ``ple_ngram``
state, each request's last PLE n-gram context) and the real sglang-router in PD mode.

The prefill server keeps the PLE table (``hbm``); one decode server runs ``dram``,
another ``off``, a router fronts each pairing, and a single ``hbm`` server is the
reference: served tokens are teacher-forced on it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from engram_testing.client import generate_ids
from engram_testing.qwen4_tiny_checkpoint import write_tiny_checkpoint
from engram_testing.server import TRANSFER, free_port, sglang_router, sglang_server

from test.serving.markers import needs_mooncake
from test.serving.qwen4_served import (
    ARGS,
    NEW_TOKENS,
    TIE,
    VOCAB,
    assert_agree,
    random_prompts,
    teacher_forced_gaps,
)
from test.serving.request_fuzz import fuzz_and_check, target_of

pytestmark = [pytest.mark.slow, needs_mooncake]

START_S = 900


@dataclass(frozen=True)
class Deployment:
    hbm: str  # the single server, the reference
    router_off: str  # prefill + decode_off
    router_dram: str  # prefill + decode_dram
    logs: Path
    workers: dict[str, str]


@pytest.fixture(scope="module")
def pd(tmp_path_factory) -> Iterator[Deployment]:
    model = write_tiny_checkpoint(
        tmp_path_factory.mktemp("qwen4") / "tiny", seed=random.randrange(1 << 30)
    )
    logs = tmp_path_factory.mktemp("pd-logs")
    bootstrap = str(free_port())
    prefill = ("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", bootstrap)
    decode = ("--disaggregation-mode", "decode")
    servers = {
        "prefill": (*prefill, *TRANSFER, "--engram-offload", "hbm"),
        "decode_off": (*decode, *TRANSFER, "--engram-offload", "off"),
        "decode_dram": (*decode, *TRANSFER, "--engram-offload", "dram"),
        "hbm": ("--engram-offload", "hbm"),
    }
    with contextlib.ExitStack() as stack:
        # NOTE: the servers start side by side; the stack stops whichever started.
        with ThreadPoolExecutor(len(servers)) as pool:
            started = {
                name: pool.submit(
                    stack.enter_context,
                    sglang_server(model, *ARGS, *args, log=logs / f"{name}.log", timeout_s=START_S),
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

        yield Deployment(urls["hbm"], router("decode_off"), router("decode_dram"), logs, urls)


def _serve(url: str, prompts: list[list[int]]) -> list[list[int]]:
    return [generate_ids(url, p, NEW_TOKENS) for p in prompts]


def test_decode_dram_serves_what_one_server_computes(pd):
    """Every token teacher-forced on the single server, the second (the decode worker's
    first step, its PLE hash over the transferred n-gram context) included."""
    prompts = random_prompts(random.Random(), 6)
    served = _serve(pd.router_dram, prompts)
    assert_agree("PD, decode dram, on hbm", teacher_forced_gaps(pd.hbm, prompts, served))


def test_decode_off_serves_the_prefill_token_then_the_model_without_ple(pd):
    prompts = random_prompts(random.Random(), 6)
    served = _serve(pd.router_off, prompts)
    single = [generate_ids(pd.hbm, p, 1) for p in prompts]
    # the first token is the prefill worker's, which has the table
    assert [s[:1] for s in served] == single
    gaps = teacher_forced_gaps(pd.hbm, prompts, served)
    print(f"PD, decode off, on hbm: {sum(g > TIE for g in gaps)}/{len(gaps)} tokens disagree")
    assert sum(g > TIE for g in gaps) >= 0.2 * len(gaps), gaps
    prefill, decode_off = ((pd.logs / f"{n}.log").read_text() for n in ("prefill", "decode_off"))
    assert "Engram placement for this prefill worker: hbm" in prefill
    assert "Engram placement for this decode worker: off" in decode_off
    assert "PLE table in off: sglang-engram's tables, nothing held" in decode_off


@pytest.mark.parametrize("decode", ["decode_off", "decode_dram"])
def test_fuzzed_requests_through_the_router_kill_no_worker(pd, decode):
    router = pd.router_off if decode == "decode_off" else pd.router_dram
    workers = (pd.workers["prefill"], pd.workers[decode])
    prompt = random_prompts(random.Random(5), 1)[0]
    target = target_of(
        f"Qwen3.8-Flash-Next, PD prefill hbm / {decode}", router, workers, VOCAB, prompt
    )
    summary = fuzz_and_check(target)
    assert summary["kinds_tried"] == summary["kinds_defined"] >= 40, summary
