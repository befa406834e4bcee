"""Requests to a running SGLang server or router, as the tests and the serving benchmarks
send them: a POST whose error status is returned, greedy generation by token ids or text,
and the plugin's ``sglang:engram_*`` samples of ``/metrics``, settled or grown (or parsed
from a text, as ``cluster status`` reads its gauges)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from sglang_engram.cluster.keys import bearer


def post(
    url: str, path: str, body: dict, timeout: float = 300, key: str | None = None
) -> tuple[int, dict]:
    """(HTTP status, JSON body) of a POST (sending ``key``); error statuses are returned,
    not raised."""
    headers = {"Content-Type": "application/json", **bearer(key)}
    req = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def generate_ids(
    url: str, prompt_ids: list[int], max_new_tokens: int = 24, key: str | None = None
) -> list[int]:
    """Greedy output token ids of one request (``ignore_eos``: always ``max_new_tokens``)."""
    status, out = post(
        url,
        "/generate",
        {
            "input_ids": prompt_ids,
            "sampling_params": {
                "temperature": 0.0,
                "max_new_tokens": max_new_tokens,
                "ignore_eos": True,
            },
        },
        key=key,
    )
    assert status == 200, out
    return list(out["output_ids"])


def generate(url: str, prompts: list[str], max_new_tokens: int = 32) -> list[str]:
    """Greedy completions of text prompts, one request at a time."""
    out = []
    for prompt in prompts:
        body = {
            "text": prompt,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens},
        }
        status, reply = post(url, "/generate", body)
        assert status == 200, reply
        out.append(reply["text"])
    return out


def metrics_after(url: str, before: dict[str, float], name: str, timeout_s: float = 10) -> dict:
    """/metrics once ``name`` has grown past ``before`` (the plugin folds its counters
    in once a second), or as it is at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = metrics(url)
        if now.get(name, 0) > before.get(name, 0) or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def flush_prefix_cache(url: str) -> None:
    """Empty the server's prefix (radix) cache, so that the next prompts run whole.
    NOTE: a random prompt may begin with a token an earlier request began with; that
    cached prefix is not run, nor its rows looked up, again."""
    req = urllib.request.Request(f"{url}/flush_cache?timeout=10", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200, r.read()


def settled_metrics(
    url: str, labelled: bool = False, wants: dict[str, float] | None = None, timeout_s: float = 30
) -> dict[str, float]:
    """``metrics`` once every name in ``wants`` reached its value and two reads a second
    apart agree, or as it is at the timeout.

    NOTE: the plugin folds the tables' counters into /metrics once a second, so a read
    right after a request finished can miss that request's last steps: a count taken
    as "before" must settle too, or the next request is charged for them."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, float] | None = None
    while True:
        now = metrics(url, labelled)
        reached = all(now.get(k, 0) >= v for k, v in (wants or {}).items())
        if (reached and now == last) or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(1.1)


def metrics(url: str, labelled: bool = False) -> dict[str, float]:
    """``sglang:engram_*`` samples of /metrics (``..._total``, ``..._count``, ...), summed
    over labels (or keyed ``name{label=value,...}`` with ``labelled``)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("sglang:engram_"):
                key = s.name
                if labelled and s.labels:
                    key += "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"
                out[key] = out.get(key, 0.0) + s.value
    return out


def parse_engram_gauges(text: str) -> list[dict]:
    """``[{"name", "labels", "value"}]`` for each ``sglang:engram_*`` gauge sample in a
    ``/metrics`` text, as ``cluster status`` reads a worker's."""
    from sglang_engram.cluster.engram_gauges import gauges
    from sglang_engram.metrics.scrape import parse_engram_samples

    return gauges(parse_engram_samples(text))
