"""PD-disaggregated sglang-engram clusters on Ray: ``python -m sglang_engram.cluster``.

Prefill workers keep the Engram tables, decode workers run with them in DRAM or off, the
transfer backend (mooncake or nixl) moves each prompt's KV cache from prefill to decode,
and the sglang-router in PD mode splits every request. Ray schedules and hosts the
processes; this package describes (``spec``, ``assignment``, ``plan``) and drives them
(``up``, ``actor``, ``supervisor``, ``registration``; ``state``, ``status``). Needs the
``cluster`` extra (Ray, sglang-router, psutil).
"""
