"""Engram counters on SGLang's Prometheus ``/metrics`` (``--enable-metrics``).

SGLang's scheduler processes write their metrics through ``prometheus_client``'s
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, set by the launcher) and the HTTP
server aggregates them; ours join the same files. A daemon thread in each scheduler
turns the tables' cumulative :class:`TableCounters` into counter increments; the
lookup latency histogram observes every lookup (on a GPU, once its CUDA events complete).

With tensor parallelism every rank looks up every row id, so rows requested are
exported by TP rank 0 only; unique rows and bytes read are summed over the GPUs that
read them (a DeepSeek-V4.1 rank reads its own shard, plus, for the ids it does not
own, a masked row 0). Lookups replayed from a CUDA graph are not counted.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from engram.tables import TableCounters
from sglang_engram import table_registry

logger = logging.getLogger(__name__)

PREFIX = "sglang:engram_"
LATENCY_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
# NOTE: a dram or ssd table reports the bytes its HBM hot cache served under "hbm".
HOT_TIER = "hbm"


class EngramMetrics:
    def __init__(self, interval_s: float = 1.0, *, export_requests: bool = True):
        from prometheus_client import Counter, Gauge, Histogram

        self.export_requests = export_requests
        self.rows = Counter(f"{PREFIX}rows_requested", "Engram rows requested", ["layer"])
        self.unique = Counter(
            f"{PREFIX}unique_rows", "Distinct Engram rows read per lookup, summed", ["layer"]
        )
        self.bytes_read = Counter(f"{PREFIX}bytes_read", "Engram bytes read", ["tier"])
        self.latency = Histogram(
            f"{PREFIX}lookup_seconds",
            "Engram lookup time (device time on a GPU)",
            buckets=LATENCY_BUCKETS,
        )
        self.table_bytes = Gauge(
            f"{PREFIX}table_bytes",
            "Engram table bytes held",
            ["tier"],
            multiprocess_mode="livesum",
        )
        self.hit_ratio = Gauge(
            f"{PREFIX}hot_cache_hit_ratio",
            "Share of Engram bytes served by the HBM hot cache",
            multiprocess_mode="livemax",
        )
        self.interval_s = interval_s
        self._seen: dict[int, dict[str, Any]] = {}
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
        for tier, n in table_registry.memory_by_tier().items():
            self.table_bytes.labels(tier=tier).set(n)
        hot = total = 0
        for entry in table_registry.served():
            counters = entry.table.counters
            if not isinstance(counters, ObservedCounters):
                counters = ObservedCounters.adopt(counters, self.latency)
                entry.table.counters = counters
            now = counters.snapshot()
            last = self._seen.get(
                id(counters), {"rows_requested": 0, "unique_rows": 0, "bytes_read": {}}
            )
            layer = str(entry.layer_id)
            if self.export_requests:
                requested = now["rows_requested"] - last["rows_requested"]
                self.rows.labels(layer=layer).inc(requested)
            self.unique.labels(layer=layer).inc(max(0, now["unique_rows"] - last["unique_rows"]))
            for tier, n in now["bytes_read"].items():
                self.bytes_read.labels(tier=tier).inc(n - last["bytes_read"].get(tier, 0))
            self._seen[id(counters)] = now
            if entry.table.placement in ("dram", "ssd"):
                hot += now["bytes_read"].get(HOT_TIER, 0)
                total += sum(now["bytes_read"].values())
        self.hit_ratio.set(hot / total if total else 0.0)


class ObservedCounters(TableCounters):
    """A table's counters that also feed the lookup-latency histogram."""

    histogram: Any = None

    @classmethod
    def adopt(cls, old: TableCounters, histogram: Any) -> ObservedCounters:
        snap = old.snapshot()
        new = cls(
            lookups=snap["lookups"],
            rows_requested=snap["rows_requested"],
            unique_rows=snap["unique_rows"],
            bytes_read=snap["bytes_read"],
            seconds=snap["seconds"],
        )
        new.histogram = histogram
        return new

    def record(
        self, rows: int, unique: int, tier_bytes: dict[str, int], seconds: list[float]
    ) -> None:
        super().record(rows, unique, tier_bytes, seconds)
        for duration in seconds:
            self.histogram.observe(duration)


_metrics: EngramMetrics | None = None


def after_init_metrics_collector(result: object, scheduler: object, *args: object) -> None:
    """AFTER ``Scheduler.init_metrics_collector``: start ours if SGLang exports metrics."""
    global _metrics
    from sglang.srt.runtime_context import get_observability, get_parallel

    if not get_observability().enable_metrics or _metrics is not None:
        return
    _metrics = EngramMetrics(export_requests=get_parallel().tp_rank == 0)
    _metrics.start()
    logger.info("sglang-engram: exporting %s* metrics", PREFIX)
