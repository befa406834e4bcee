"""``python -m sglang_engram.cluster.router_main ARGS``: the sglang-router, started fast.

Takes exactly ``python -m sglang_router.launch_router``'s arguments (its own parser) and
starts the same Rust router. NOTE: sglang-router 0.3.2's launcher imports its Python
debugging balancer (``mini_lb``), which imports SGLang, torch and transformers: 14 s of
CPU before the router starts, 40 s on a loaded 2-core machine. A restarted router is
the cluster's whole front door, so this skips that import; `plan` runs it for every
router the cluster starts.

``--config FILE`` (YAML: flag names without dashes, to values or lists of values) gives
it flags kept off its command line, as SGLang's own ``--config`` does: the cluster's
keys; the command line's flags win.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml


def main(argv: list[str] | None = None) -> None:
    import setproctitle
    from sglang_router.router import Router
    from sglang_router.router_args import RouterArgs

    parser = argparse.ArgumentParser(prog="python -m sglang_engram.cluster.router_main")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    argv = with_config(sys.argv[1:] if argv is None else argv)
    args = RouterArgs.from_cli_args(parser.parse_args(argv), use_router_prefix=False)
    setproctitle.setproctitle("sglang::router")
    args._validate_router_args()
    Router.from_args(args).start()


def with_config(argv: list[str]) -> list[str]:
    """``argv`` with its ``--config FILE`` replaced by the file's flags, put first."""
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    flags: list[str] = []
    for key, value in (yaml.safe_load(Path(argv[i + 1]).read_text()) or {}).items():
        flags += [f"--{key}", *map(str, value if isinstance(value, list) else [value])]
    return [*flags, *argv[:i], *argv[i + 2 :]]


if __name__ == "__main__":
    main()
