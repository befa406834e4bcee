"""The tier benchmark's pieces (``benchmark/bench_serving_tiers.py``): ``servers`` (the
configs, their flags and memory, starting them), ``seed_profile`` (the seeded config's
profile over the benchmark text's train split), ``runs`` (one run, repeats interleaved),
``workload`` (held-out prompts of the benchmark text), ``cache_curve`` (the RAM-cache hit
ratio against its size, empty and seeded) and ``report`` (/metrics figures, page-cache
residency, the table, the PNG)."""
