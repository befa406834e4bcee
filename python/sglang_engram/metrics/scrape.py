"""Reading the Engram samples back from a server's ``/metrics``: the one scraper that
``cluster status`` (a worker's gauges) and ``compare sweep`` (a point's counters) use.

Samples of other metrics (SGLang's own) are left out; a server without ours (no plugin,
metrics disabled, a non-Engram model) gives none, which is not an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import requests
from prometheus_client.parser import text_string_to_metric_families

from sglang_engram.metrics.names import PREFIX


class ScrapeError(Exception):
    """A ``/metrics`` that could not be read; the message names the URL and why."""


@dataclass(frozen=True)
class Sample:
    name: str  # the sample's own name: a counter's ends in _total, a histogram's in _bucket ...
    kind: str  # its metric's type: counter, gauge, histogram, ...
    labels: dict[str, str]
    value: float


def parse_engram_samples(text: str) -> list[Sample]:
    """Every ``sglang:engram_*`` sample of a ``/metrics`` page, in its order, but the
    creation times.

    NOTE: outside multiprocess mode prometheus_client also exports when each counter was
    created, as a gauge ``<name>_created`` (SGLang's multiprocess collector does not); a
    timestamp, not something the tables counted."""
    return [
        Sample(s.name, family.type, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        if family.name.startswith(PREFIX)
        for s in family.samples
        if not s.name.endswith("_created")
    ]


def scrape_engram(metrics_url: str, timeout_s: float) -> list[Sample]:
    """The Engram samples ``metrics_url`` serves; :class:`ScrapeError` when it cannot be
    fetched or is not Prometheus' text format."""
    try:
        resp = requests.get(metrics_url, timeout=timeout_s)
        resp.raise_for_status()
        return parse_engram_samples(resp.text)
    except (requests.RequestException, ValueError) as exc:  # ValueError: not the text format
        raise ScrapeError(f"{metrics_url}: {type(exc).__name__}") from exc
