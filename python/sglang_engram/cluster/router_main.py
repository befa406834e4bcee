"""``python -m sglang_engram.cluster.router_main ARGS``: the sglang-router, started fast.

Takes exactly ``python -m sglang_router.launch_router``'s arguments (its own parser) and
starts the same Rust router. NOTE: sglang-router 0.3.2's launcher imports its Python
debugging balancer (``mini_lb``), which imports SGLang, torch and transformers: 14 s of
CPU before the router starts, 40 s on a loaded 2-core machine. A restarted router is
the cluster's whole front door, so this skips that import; `plan` runs it for every
router the cluster starts.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> None:
    import setproctitle
    from sglang_router.router import Router
    from sglang_router.router_args import RouterArgs

    parser = argparse.ArgumentParser(prog="python -m sglang_engram.cluster.router_main")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    args = RouterArgs.from_cli_args(
        parser.parse_args(sys.argv[1:] if argv is None else argv), use_router_prefix=False
    )
    setproctitle.setproctitle("sglang::router")
    args._validate_router_args()
    Router.from_args(args).start()


if __name__ == "__main__":
    main()
