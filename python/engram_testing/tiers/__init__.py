"""The tier benchmark's pieces (``benchmark/bench_serving_tiers.py``): ``workload``
(held-out stdlib prompts, the RAM-cache curve) and ``report`` (/metrics figures,
page-cache residency, the table, the PNG)."""
