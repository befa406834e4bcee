"""The one /metrics scraper, as compare sums a deployment's counters and cluster status
reads a worker's gauges: real prometheus_client endpoints (the names the exporter
registers), a page that is not Prometheus' text format, and a port nobody listens on."""

from __future__ import annotations

import random
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from sglang_engram.cluster.engram_gauges import fetch_engram_gauges
from sglang_engram.compare.point_counters import point_counters, summed_counters
from sglang_engram.metrics.names import (
    BYTES_READ,
    HOT_CACHE_HIT_RATIO,
    HOT_TIER,
    ROWS_REQUESTED,
    TABLE_BYTES,
    UNIQUE_ROWS,
)


class _Server:
    """One Engram exporter's metrics, in a registry of its own, on a real HTTP port."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.rows = Counter(ROWS_REQUESTED, "rows", ["layer"], registry=self.registry)
        self.unique = Counter(UNIQUE_ROWS, "unique", ["layer"], registry=self.registry)
        self.read = Counter(BYTES_READ, "read", ["tier"], registry=self.registry)
        self.held = Gauge(TABLE_BYTES, "held", ["tier"], registry=self.registry)
        self.ratio = Gauge(HOT_CACHE_HIT_RATIO, "ratio", registry=self.registry)
        other = Gauge("sglang:num_running_reqs", "not ours", registry=self.registry)
        other.set(random.randint(1, 9))
        self.http, _ = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self.url = f"http://127.0.0.1:{self.http.server_port}"

    def serve(self, tier: str) -> dict[str, float]:
        """Count a random amount of work on two layers; what was counted."""
        done = {"rows": 0.0, "unique": 0.0, tier: 0.0, HOT_TIER: 0.0}
        for layer in ("3", "7"):
            rows = random.randint(50, 500)
            unique = random.randint(1, rows)
            self.rows.labels(layer=layer).inc(rows)
            self.unique.labels(layer=layer).inc(unique)
            done["rows"] += rows
            done["unique"] += unique
        for t in (tier, HOT_TIER):
            n = random.randint(1, 1 << 30)
            self.read.labels(tier=t).inc(n)
            done[t] += n
        return done


class _NotMetrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b"<html><body>a proxy's error page</body></html>\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers():
    made = [_Server(), _Server()]
    html = ThreadingHTTPServer(("127.0.0.1", 0), _NotMetrics)
    threading.Thread(target=html.serve_forever, daemon=True).start()
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    yield made, f"http://127.0.0.1:{html.server_port}", dead
    html.shutdown()
    for server in made:
        server.http.shutdown()


def test_counters_are_summed_over_the_servers_and_unreadable_ones_named(servers):
    (a, b), html, dead = servers
    tier = random.choice(["dram", "ssd"])
    held = {"a": random.randint(1, 1 << 40), "b": random.randint(1, 1 << 40)}
    a.held.labels(tier=tier).set(held["a"])
    b.held.labels(tier=tier).set(held["b"])
    ratios = [random.random(), random.random()]
    a.ratio.set(ratios[0])
    b.ratio.set(ratios[1])
    urls = [a.url, b.url + "/", html, dead]
    before = summed_counters(urls, timeout_s=5)
    assert before["errors"] == [f"{html}/metrics: ValueError", f"{dead}/metrics: ConnectionError"]
    assert before["table_bytes"] == {tier: held["a"] + held["b"]}
    assert before["hot_cache_hit_ratio"] == max(ratios)
    did = [a.serve(tier), b.serve(tier)]
    after = summed_counters(urls, timeout_s=5)
    assert after["rows_requested"] - before["rows_requested"] == sum(d["rows"] for d in did)
    assert after["unique_rows"] - before["unique_rows"] == sum(d["unique"] for d in did)
    tokens = random.randint(1, 1000)
    point = point_counters(before, after, tokens, tier)
    read = {t: sum(d[t] for d in did) for t in (tier, HOT_TIER)}
    assert point["bytes_read"] == read
    assert point["hot_cache_hit_ratio"] == pytest.approx(read[HOT_TIER] / sum(read.values()))
    assert point["rows_per_output_token"] == pytest.approx(sum(d["rows"] for d in did) / tokens)


def test_cluster_status_reads_only_the_gauges_and_nothing_from_an_unreadable_page(servers):
    (a, _), html, dead = servers
    held, ratio = random.randint(1, 1 << 40), random.random()
    a.held.labels(tier="dram").set(held)
    a.ratio.set(ratio)
    a.serve("dram")  # counters, which status leaves out
    assert fetch_engram_gauges(f"{a.url}/metrics") == [
        {"name": TABLE_BYTES, "labels": {"tier": "dram"}, "value": float(held)},
        {"name": HOT_CACHE_HIT_RATIO, "labels": {}, "value": ratio},
    ]
    assert fetch_engram_gauges(f"{html}/metrics") == []
    assert fetch_engram_gauges(f"{dead}/metrics") == []
