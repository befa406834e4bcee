"""PD-disaggregated sglang-engram clusters on Ray: ``python -m sglang_engram.cluster``.

Prefill workers keep the Engram tables, decode workers run with them in DRAM or off,
the transfer backend (mooncake or nixl) moves each prompt's KV cache from prefill to
decode, and the sglang-router in PD mode splits every request. Ray places and
supervises the processes; this package only describes and drives them.

How it fits together:

* ``spec`` / ``spec_loader``: the YAML spec and its checks.
* ``placement`` / ``plan``: each worker's node and GPUs (first-fit, largest first),
  ports (unique cluster-wide, fixed by the spec), command line and log file.
* ``up``: one placement group per worker, pinned to its planned node; inside it a
  named, detached Ray actor (``actor``) that runs ``python -m sglang.launch_server``
  under a ``supervisor`` (restart with exponential backoff, bounded; then ``failed``
  and the cluster ``degraded``); every /health answered, then the router (on the node
  running ``up``) with all prefill and decode URLs; then each worker's
  ``registration`` loop, which removes a dead worker from the router and registers
  its restarted process again through the router's ``/workers`` API (``router_api``).
* Lifetime: without ``--detach``, ``up`` stays in the foreground reporting changes and
  stops everything on Ctrl-C or SIGTERM; it may start its own local Ray cluster, which
  ends with it. With ``--detach`` (which needs ``--address``) the actors keep
  supervising inside the Ray cluster after ``up`` returns. Either way ``state``
  records the Ray address, namespace (``sglang-engram-<name>``) and actor names, so
  ``status`` and ``down`` (``control``) work from any other process on that host.
* ``down`` stops the router, then every worker's process tree, kills the actors and
  removes the placement groups: what ``up`` started, and nothing else on the cluster.
"""
