"""The request fuzz suite's runner: send hypothesis-drawn malformed and degenerate requests
(``request_kinds.py``) to a real server or PD router, and prove after every batch that
nothing died and nothing changed.

Checked for every request: no 5xx, no dropped connection, the answer its kind expects
(a 4xx for what must be refused, a 200 for what must be served). Checked after every
``CHECK_EVERY`` requests and at the end: each worker answers ``/health``, and a fixed good
request returns the same greedy tokens as before the fuzzing started. Also here: clients
that go away mid-stream or before their answer, and the slots they held freed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psutil
import requests
from engram_testing.client import generate_ids
from hypothesis import HealthCheck, Phase, given, seed, settings
from sglang_engram.cluster.prompt_limits import longest_prompt

from test.serving.request_kinds import KINDS, REFUSED, SERVED, Kind, Model, Request

CHECK_EVERY = 50
# NOTE: the CI share, each kind once per target; ENGRAM_FUZZ_REQUESTS
# (benchmark/fuzz_requests.sh) asks for more
REQUESTS = int(os.environ.get("ENGRAM_FUZZ_REQUESTS", str(len(KINDS))))

SEED = int(os.environ.get("ENGRAM_FUZZ_SEED", "20261204"))
GOOD_NEW_TOKENS = 8


@dataclass(frozen=True)
class Target:
    """Where the requests go (``url``: a server or a PD router) and every worker behind it
    (each must stay healthy)."""

    name: str
    url: str
    workers: tuple[str, ...]
    model: Model
    good_prompt: tuple[int, ...]

    def good_tokens(self) -> list[int]:
        return generate_ids(self.url, list(self.good_prompt), GOOD_NEW_TOKENS)

    def check_alive(self, baseline: list[int], after: str) -> None:
        for worker in self.workers:
            r = requests.get(f"{worker}/health", timeout=60)
            assert r.status_code == 200, f"{self.name}: {worker} unhealthy after {after}"
        got = self.good_tokens()
        assert got == baseline, (
            f"{self.name}: good request changed after {after}: {got} != {baseline}"
        )


@dataclass
class Counts:
    by_kind: Counter = field(default_factory=Counter)
    by_class: Counter = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.by_class.values())

    def summary(self, target: Target, rss: tuple[int, int] | None = None) -> dict:
        out = {
            "target": target.name,
            "requests": self.total,
            "kinds_tried": len(self.by_kind),
            "kinds_defined": len(KINDS),
            "2xx": self.by_class["2xx"],
            "4xx": self.by_class["4xx"],
            "5xx": self.by_class["5xx"],
            "deaths": self.by_class["dropped"],
            "hung": self.by_class["hung"],
        }
        if rss is not None:
            out["rss_before_mib"], out["rss_after_mib"] = (v >> 20 for v in rss)
        return out


# NOTE: every kind asks for a few tokens: an answer this late is a request the server lost
HUNG_S = 90


def send(url: str, req: Request, timeout: float = HUNG_S) -> int:
    """The HTTP status of one request (0: the connection dropped, -1: no answer within
    ``timeout``). A streamed answer is read to its end; an error inside a 200 stream
    counts as a 5xx."""
    kwargs = {"data": req.body} if isinstance(req.body, str) else {"json": req.body}
    try:
        with requests.post(f"{url}{req.path}", timeout=timeout, stream=req.stream, **kwargs) as r:
            if not (req.stream and r.status_code == 200):
                return r.status_code
            for line in r.iter_lines():
                if b'"error"' in line and line.startswith(b"data:"):
                    code = json.loads(line[5:]).get("error", {}).get("code", 500)
                    return int(code) if isinstance(code, int) else 500
            return 200
    except requests.Timeout:
        return -1
    except requests.ConnectionError:
        return 0


def classify(status: int) -> str:
    if status == 0:
        return "dropped"
    if status == -1:
        return "hung"
    return f"{status // 100}xx"


def drawn(
    kind: Kind, model: Model, examples: int, seed_value: int, send_one: Callable[[Request], None]
) -> Callable[[], None]:
    """A hypothesis run of ``examples`` bodies of ``kind``, each sent with ``send_one``
    (generation only: a server that failed is no place to shrink an example)."""

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(seed_value)
    @given(kind.body(model))
    def run(body: Any) -> None:
        send_one(Request(kind.name, kind.expect_of(model), kind.path, body, kind.stream))

    return run


def fuzz(target: Target, n: int = REQUESTS, seed_value: int = SEED) -> Counts:
    """At least ``n`` drawn requests to ``target``, the same share of every kind (hypothesis
    draws each kind's bodies); returns the counts (the caller asserts)."""
    counts = Counts()
    baseline = target.good_tokens()

    def send_one(req: Request) -> None:
        status = send(target.url, req)
        cls = classify(status)
        counts.by_kind[req.kind] += 1
        counts.by_class[cls] += 1
        line = f"{req.kind}: {status} for {str(req.body)[:200]}"
        if cls in ("5xx", "dropped", "hung"):
            counts.server_errors.append(line)
            raise AssertionError(f"{target.name}: {line}")
        if (req.expect == REFUSED and cls != "4xx") or (req.expect == SERVED and cls != "2xx"):
            counts.wrong.append(line)
        if counts.total % CHECK_EVERY == 0:
            target.check_alive(baseline, f"{counts.total} fuzzed requests")

    # NOTE: hypothesis stops early on a kind with few distinct bodies, so passes repeat,
    # each with fresh seeds, until n requests have been sent
    passes = 0
    while counts.total < n:
        per_kind = -(-(n - counts.total) // len(KINDS))
        for i, kind in enumerate(KINDS):
            drawn(kind, target.model, per_kind, seed_value + passes * len(KINDS) + i, send_one)()
        passes += 1
    target.check_alive(baseline, f"all {counts.total} fuzzed requests")
    return counts


def report(counts: Counts, target: Target, rss: tuple[int, int] | None = None) -> dict:
    """Print the counts (and append them to ``ENGRAM_FUZZ_REPORT`` where set)."""
    summary = counts.summary(target, rss)
    print("fuzz:", json.dumps(summary))
    path = os.environ.get("ENGRAM_FUZZ_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(summary) + "\n")
    return summary


def tree_rss(url: str) -> int:
    """Resident bytes of the process listening on ``url``'s port and all its children."""
    port = int(url.rsplit(":", 1)[1])
    pid = next(
        c.pid
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid
    )
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def sglang_metric(url: str, names: tuple[str, ...]) -> float:
    """The sum of SGLang's own ``/metrics`` samples named ``names``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(f"{url}/metrics", timeout=30).text
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name in names
    )


BUSY = ("sglang:num_running_reqs", "sglang:num_queue_reqs")
ABORTED = ("sglang:num_aborted_requests_total",)


def idle(url: str, timeout_s: float = 60) -> float:
    """Seconds until the server holds no running or queued request (raises at timeout)."""
    start = time.monotonic()
    while (busy := sglang_metric(url, BUSY)) > 0:
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{url} still holds {busy} requests after {timeout_s}s")
        time.sleep(0.5)
    return time.monotonic() - start


def long_generation(target: Target, stream: bool) -> dict:
    """A request for as many tokens as the context holds: tens of seconds on a CPU."""
    new_tokens = target.model.context_len - len(target.good_prompt) - 16
    return {
        "input_ids": list(target.good_prompt),
        "sampling_params": {"max_new_tokens": new_tokens, "ignore_eos": True},
        "stream": stream,
    }


def walk_away(target: Target, streams: int, aborts: int, freed_within_s: float = 20) -> None:
    """``streams`` streaming clients that read a few chunks and disconnect, and ``aborts``
    clients that give up before any answer, while good requests run beside them: the
    good requests' tokens must not change, and every abandoned request must leave."""
    baseline = target.good_tokens()
    aborted = [sglang_metric(w, ABORTED) for w in target.workers]
    done = threading.Event()

    def stream_then_leave() -> None:
        with requests.post(
            f"{target.url}/generate",
            json=long_generation(target, stream=True),
            stream=True,
            timeout=120,
        ) as r:
            assert r.status_code == 200
            for i, _ in enumerate(r.iter_lines()):
                if i >= 6:
                    break

    def give_up() -> None:
        try:
            requests.post(
                f"{target.url}/generate", json=long_generation(target, stream=False), timeout=0.3
            )
        except requests.exceptions.ReadTimeout:
            return
        raise AssertionError("a generation of thousands of tokens answered within 0.3 s")

    def good_loop() -> list[list[int]]:
        got = []
        while not done.is_set():
            got.append(target.good_tokens())
        return got

    with ThreadPoolExecutor(4) as pool:
        goods = [pool.submit(good_loop) for _ in range(2)]
        leavers = [pool.submit(stream_then_leave) for _ in range(streams)]
        leavers += [pool.submit(give_up) for _ in range(aborts)]
        try:
            for f in leavers:
                f.result()
        finally:
            done.set()
        served = [tokens for g in goods for tokens in g.result()]
    assert served and all(tokens == baseline for tokens in served), served
    # NOTE: had they run on, the abandoned requests would hold the server for minutes
    for worker, before in zip(target.workers, aborted, strict=True):
        idle(worker, freed_within_s)
        assert sglang_metric(worker, ABORTED) - before >= streams + aborts, worker


def target_of(
    name: str,
    url: str,
    workers: tuple[str, ...],
    vocab: int,
    prompt: list[int],
    chat_marks_roles: bool = False,
) -> Target:
    """A target whose limits are read from its workers (``url`` not among them: a PD
    router)."""
    info = requests.get(f"{workers[0]}/v1/models", timeout=30).json()
    context_len = int(info["data"][0]["max_model_len"])
    longest = [longest_prompt(w) for w in workers]
    model = Model(
        vocab, context_len, min(longest), max(longest), url not in workers, chat_marks_roles
    )
    return Target(name, url, workers, model, tuple(prompt))


def fuzz_and_check(target: Target, n: int = REQUESTS) -> dict:
    """A warm-up batch, then ``n`` requests between two RSS reads of each worker; asserts
    no 5xx, no death, every refused kind refused and every served kind served, the good
    request unchanged and each worker's RSS within 5 % of what it was."""
    fuzz(target, CHECK_EVERY, SEED + 1)
    before = sum(tree_rss(w) for w in target.workers)
    counts = fuzz(target, n)
    after = sum(tree_rss(w) for w in target.workers)
    summary = report(counts, target, (before, after))
    assert not counts.server_errors and not counts.wrong, counts.wrong
    assert after <= 1.05 * before, summary
    return summary
