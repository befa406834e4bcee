"""PD-disaggregated sglang-engram clusters on Ray: ``python -m sglang_engram.cluster``.

Prefill workers keep the Engram tables, decode workers run with them in DRAM or off,
the transfer backend (mooncake or nixl) moves each prompt's KV cache from prefill to
decode, and the sglang-router in PD mode splits every request. Ray schedules and hosts
the processes; this package only describes and drives them. Needs the ``cluster`` extra
(Ray, sglang-router).

* ``spec``: the YAML spec and its checks (one pydantic schema).
* ``layout`` / ``plan``: each worker's node (the GPU assignment), ports, command line, log.
* ``up``: one named Ray actor per worker (``actor``) on its node, running
  ``python -m sglang.launch_server`` under a ``supervisor`` (restart with exponential
  backoff, bounded; then ``failed`` and the cluster ``degraded``); every /health
  answered, then the router with all prefill and decode URLs; then each worker's
  ``registration`` loop, which takes a dead worker off the router and registers its
  restarted process again. ``up`` stays in the foreground until Ctrl-C or SIGTERM and
  then stops everything; ``state`` tells ``status`` (``status``, ``engram_gauges``)
  and ``down`` (which signals ``up``) in another shell where to find it.
"""
