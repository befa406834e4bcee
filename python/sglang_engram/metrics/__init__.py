"""``sglang:engram_*`` on SGLang's ``/metrics``: the names (one module), the exporter
that folds the served tables' counters in once a second, and the one scraper that
``cluster status`` and ``compare sweep`` read them back with.
"""

__all__ = ["exporter", "names", "scrape"]
