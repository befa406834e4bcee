"""Which CUDA-graph backend serves the Engram lookups that a plain graph cannot replay.

A placement whose lookups run host code (``Placement.host_lookup``: ``ssd`` tables, of any
family, are read from files on the host), and the lookups of a family
marked ``eager`` (the tiny model) go through the core library's tables (RAM and HBM caches, counters): a plain
(``full``) CUDA graph would replay the capture's rows. SGLang's breakable backend runs
them as eager breaks between captured segments (``forward/graph_breaks.py``), so:

- a phase whose backend the user did not choose gets ``breakable`` for decode (SGLang's
  default there is ``full``); prefill keeps SGLang's default, which is ``breakable`` or
  ``disabled`` (and a PD prefill worker's decode graphs stay off, as SGLang decides);
- a choice of ``breakable`` or ``disabled`` is kept; ``full`` is refused with one line
  for ``ssd`` and kept for the tiny model's ``hbm``/``dram`` tables (a user's choice);
- where the breakable backend cannot serve (SGLang's memory saver for graphs), graphs
  are turned off, said in one log line.

NOTE: upstream's DeepSeek-V4.1 and Qwen3.8-Flash-Next classes serve ``hbm`` and ``dram``
with capture-safe kernels, and the HBM hot cache steps aside while a graph is captured (replays read the
wrapped table), so those keep SGLang's choices untouched.
"""

from __future__ import annotations

import logging
from typing import Any

from sglang_engram.protocol.family import ModelFamily
from sglang_engram.protocol.server_config import EngramServerConfig

logger = logging.getLogger(__name__)

BREAKABLE, FULL, DISABLED = "breakable", "full", "disabled"
PHASES = ("decode", "prefill")


def chosen_backend(server_args: Any, phase: str) -> str | None:
    """The backend the user chose for ``phase`` (SGLang's precedence: the JSON
    ``--cuda-graph-config``, then ``--cuda-graph-backend-<phase>``, then
    ``--disable-<phase>-cuda-graph``), or None."""
    raw = getattr(server_args, "cuda_graph_config", None)
    if raw is not None and not isinstance(raw, dict):
        raw = raw.to_dict()  # a CudaGraphConfig given to the Engine: its non-defaults
    from_json = ((raw or {}).get(phase) or {}).get("backend")
    if from_json is not None:
        return str(from_json)
    flag = getattr(server_args, f"cuda_graph_backend_{phase}", None)
    if flag is not None:
        return str(flag)
    return DISABLED if getattr(server_args, f"disable_{phase}_cuda_graph", False) else None


def graph_policy(server_args: Any, config: EngramServerConfig, family: ModelFamily | None) -> None:
    """Settle ``server_args``' CUDA-graph backends for this server's Engram lookups of
    ``family`` (the served checkpoint's; before SGLang resolves them); exits with one
    line for a choice it refuses."""
    if family is None or not family.served or not config.enabled or server_args.disable_cuda_graph:
        return
    placement = config.placement
    host = placement.host_lookup
    if not (family.eager or host):
        return
    chosen = {phase: chosen_backend(server_args, phase) for phase in PHASES}
    if host and FULL in chosen.values():
        # NOTE: a full graph replay would skip the lookups' host work and serve stale rows.
        phase = next(p for p in PHASES if chosen[p] == FULL)
        raise SystemExit(
            f"sglang-engram: error: --engram-offload {placement.name} {host} between "
            f"CUDA-graph segments, which the full {phase} backend cannot replay; use "
            f"--cuda-graph-backend-{phase} breakable (the default with {placement.name}) "
            "or disabled"
        )
    why = f"the {placement.name} tables' lookups {host}" if host else family.title
    blocker = _breakable_unavailable(server_args)
    if blocker is not None:
        if BREAKABLE not in chosen.values():
            server_args.disable_cuda_graph = True
            logger.warning("sglang-engram: CUDA graphs are off (%s; %s)", why, blocker)
        return
    if chosen["decode"] is None and getattr(server_args, "disaggregation_mode", None) != "prefill":
        server_args.cuda_graph_backend_decode = BREAKABLE
        logger.info(
            "sglang-engram: decode CUDA graphs use the breakable backend (%s): Engram "
            "lookups run eagerly between captured segments",
            why,
        )


def _breakable_unavailable(server_args: Any) -> str | None:
    """Why SGLang's breakable backend cannot capture for ``server_args``, or None."""
    from sglang.srt.utils import get_bool_env_var

    # NOTE: the backend's own constructor refuses graphs under the memory saver.
    if getattr(server_args, "enable_memory_saver", False) and get_bool_env_var(
        "SGLANG_MEMORY_SAVER_CUDA_GRAPH"
    ):
        return "the breakable backend does not run with SGLANG_MEMORY_SAVER_CUDA_GRAPH"
    return None
