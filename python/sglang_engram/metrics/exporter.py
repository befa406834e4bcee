"""Engram counters on SGLang's Prometheus ``/metrics`` (``--enable-metrics``).

SGLang's scheduler processes write their metrics through ``prometheus_client``'s
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, set by the launcher) and the HTTP
server aggregates them; ours join the same files. A daemon thread in each scheduler
turns the served tables' cumulative counters (:class:`engram.tables.TableCounters`, and
an ssd table's own ``stats()``) into counter increments; the lookup latency histogram
observes every lookup (on a GPU, once its CUDA events complete). Tables served by
upstream's ``EngramEmbedding`` (DeepSeek-V4.1 ``hbm``/``dram``) are counted too
(:mod:`sglang_engram.models.deepseek_v41.upstream_embedding`).

With tensor parallelism every rank looks up every row id, so rows requested are
exported by TP rank 0 only (tables upstream serves count each rank's share, see
``UpstreamTable``, and every rank exports it); unique rows and bytes read are summed
over the GPUs that read them (a DeepSeek-V4.1 rank reads its own shard, plus, for the
ids it does not own, a masked row 0). Lookups replayed from a CUDA graph are not counted
(nor, for tables upstream serves, the dummy lookups of a capture).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from engram.placements import placement_named
from engram.tables import TableCounters
from sglang_engram.metrics.names import (
    BYTES_READ,
    HOT_CACHE_HIT_RATIO,
    HOT_TIER,
    LOOKUP_SECONDS,
    PREFIX,
    ROWS_REQUESTED,
    SSD_COUNTERS,
    SSD_RAM_CACHE_HIT_RATIO,
    TABLE_BYTES,
    UNIQUE_ROWS,
)
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.tables import served

logger = logging.getLogger(__name__)

LATENCY_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)


class EngramMetrics:
    def __init__(
        self, runtime: EngramRuntime, interval_s: float = 1.0, *, export_requests: bool = True
    ):
        from prometheus_client import Counter, Gauge, Histogram

        self.runtime = runtime
        self.export_requests = export_requests
        self.rows = Counter(ROWS_REQUESTED, "Engram rows requested", ["layer"])
        self.unique = Counter(
            UNIQUE_ROWS, "Distinct Engram rows read per lookup, summed", ["layer"]
        )
        self.bytes_read = Counter(BYTES_READ, "Engram bytes read", ["tier"])
        self.latency = Histogram(
            LOOKUP_SECONDS,
            "Engram lookup time (device time on a GPU)",
            buckets=LATENCY_BUCKETS,
        )
        self.table_bytes = Gauge(
            TABLE_BYTES,
            "Engram table bytes held",
            ["tier"],
            multiprocess_mode="livesum",
        )
        self.hit_ratio = Gauge(
            HOT_CACHE_HIT_RATIO,
            "Share of Engram bytes served by the HBM hot cache",
            multiprocess_mode="livemax",
        )
        self.ssd = {name: Counter(name, doc, ["layer"]) for name, (_, doc) in SSD_COUNTERS.items()}
        self.ssd_hit_ratio = Gauge(
            SSD_RAM_CACHE_HIT_RATIO,
            "Share of ssd Engram rows the RAM cache served",
            multiprocess_mode="livemax",
        )
        self.interval_s = interval_s
        # NOTE: id(counters) -> (counters, last snapshot exported) of the tables served at
        # the last update; holding the counters keeps their id from going to a new table.
        self._seen: dict[int, tuple[TableCounters, dict[str, Any]]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engram-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.update()
            except Exception:  # noqa: BLE001 - metrics must never stop serving
                logger.exception("sglang-engram: metrics update failed")

    def update(self) -> None:
        """Fold what the tables counted since the last call into the metrics."""
        tables = self.runtime.tables
        for tier, n in served.memory_by_tier(tables).items():
            self.table_bytes.labels(tier=tier).set(n)
        hot = total = cache_hits = cache_reads = 0
        entries = served.served(tables)
        for entry in entries:
            counters = entry.table.counters
            if counters.on_duration is None:
                counters.on_duration = self.latency.observe
            # NOTE: the counters only grow and are never replaced; each update exports
            # the difference between two snapshots, so nothing counted in between is lost.
            now = counters.stats()
            last = self._seen.get(id(counters), (counters, _ZERO))[1]
            layer = str(entry.layer_id)
            if self.export_requests or entry.own_requests:
                self.rows.labels(layer=layer).inc(_grown(now, last, "rows_requested"))
            self.unique.labels(layer=layer).inc(_grown(now, last, "unique_rows"))
            for tier in now["bytes_read"]:
                self.bytes_read.labels(tier=tier).inc(
                    _grown(now["bytes_read"], last["bytes_read"], tier)
                )
            now["ssd"] = stats = entry.table.stats()
            for name, (key, _) in SSD_COUNTERS.items():
                if key in stats:  # an ssd table's (the others export no ssd series)
                    self.ssd[name].labels(layer=layer).inc(_grown(stats, last["ssd"], key))
            cache_hits += stats.get("ram_cache_hits", 0)
            cache_reads += stats.get("ram_cache_hits", 0) + stats.get("ram_cache_misses", 0)
            self._seen[id(counters)] = (counters, now)
            if placement_named(entry.table.placement).hot_cache:
                hot += now["bytes_read"].get(HOT_TIER, 0)
                total += sum(now["bytes_read"].values())
        for gone in self._seen.keys() - {id(entry.table.counters) for entry in entries}:
            del self._seen[gone]
        self.hit_ratio.set(hot / total if total else 0.0)
        self.ssd_hit_ratio.set(cache_hits / cache_reads if cache_reads else 0.0)


_ZERO: dict[str, Any] = {"bytes_read": {}, "ssd": {}}


def _grown(now: dict[str, Any], last: dict[str, Any], key: str) -> int:
    """How much the cumulative ``key`` grew since ``last`` (0 when absent)."""
    return now.get(key, 0) - last.get(key, 0)


def after_init_metrics_collector(runtime: EngramRuntime) -> Callable[..., None]:
    """The AFTER hook on ``Scheduler.init_metrics_collector``: start ours (``runtime``
    holds it) if SGLang exports metrics."""

    def after(result: object, scheduler: object, *args: object) -> None:
        from sglang.srt.runtime_context import get_observability, get_parallel

        with runtime.lock:
            if not get_observability().enable_metrics or runtime.metrics is not None:
                return
            metrics = EngramMetrics(runtime, export_requests=get_parallel().tp_rank == 0)
            runtime.metrics = metrics
            metrics.start()
        logger.info("sglang-engram: exporting %s* metrics", PREFIX)

    return after
