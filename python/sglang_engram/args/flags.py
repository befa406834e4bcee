"""The ``--engram-*`` command-line flags, added to SGLang's own server parser.

``add_cli_args_hook`` runs after ``ServerArgs.add_cli_args`` (so the flags show in
``python -m sglang.launch_server --help``); ``from_cli_args_hook`` runs after
``ServerArgs.from_cli_args`` and turns the parsed values into the
:class:`EngramServerConfig` every scheduler process reads.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any, Literal

from engram.errors import EngramConfigError
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.protocol.server_config import (
    DEFAULT_OFFLOAD,
    DEFAULT_RAM_CACHE_GB,
    EngramServerConfig,
)

logger = logging.getLogger(__name__)

# NOTE: every option string add_engram_args defines (the cluster launcher manages them);
# test_flags checks the parser against this list.
ENGRAM_FLAGS = (
    "--engram-offload",
    "--engram-ssd-dir",
    "--engram-prefetch",
    "--no-engram-prefetch",
    "--engram-hot-cache-gb",
    "--engram-ram-cache-gb",
    "--engram-ssd-read",
    "--engram-seed-profile",
    "--engram-profile-out",
)
# NOTE: mirrors engram.ssd.readers.READERS, the --engram-ssd-read strategies, for the
# cluster and sweep specs (reading a spec imports no torch); test_spec checks they agree.
SsdRead = Literal["mmap", "pread", "direct"]

_PLACEMENT_HELP = {
    "hbm": "device memory (TP-sharded)",
    "dram": "pinned host memory read over UVA",
    "ssd": "files under --engram-ssd-dir with a RAM cache",
    "off": "no table; Engram layers leave the residual unchanged",
}


def placement_choices() -> list[str]:
    """The placements the core library registers (engram.tables.PLACEMENTS)."""
    from engram.tables import placement_names

    return placement_names()


def add_engram_args(parser: argparse.ArgumentParser) -> None:
    """Add the Engram flags to ``parser`` (once; a second call is a no-op)."""
    if any("--engram-offload" in a.option_strings for a in parser._actions):
        return
    choices = placement_choices()
    group = parser.add_argument_group(
        "Engram (sglang-engram plugin)",
        "Where the Engram n-gram tables live. Applies to Engram models only; the same "
        "flags serve prefill and decode workers of a disaggregated deployment.",
    )
    placements = "; ".join(f"{c}: {_PLACEMENT_HELP.get(c, c)}" for c in choices)
    group.add_argument(
        "--engram-offload",
        choices=choices,
        default=None,
        help=f"Placement of the Engram tables (default {DEFAULT_OFFLOAD} for every "
        f"role). {placements}.",
    )
    group.add_argument(
        "--engram-ssd-dir",
        default=None,
        metavar="PATH",
        help="Directory for the ssd placement's table files (required with "
        "--engram-offload ssd); converted from the checkpoint on first start, "
        "reused afterwards.",
    )
    group.add_argument(
        "--engram-prefetch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Read Engram rows ahead of the layer that needs them: the tiny model's hbm/dram "
        "lookups start on a side stream as soon as the batch's token ids are known "
        "(DeepSeek-V4.1 keeps upstream's schedule); ssd tables read a request's rows from disk "
        "when it is queued and the next decode step's rows as soon as a step's tokens are "
        "sampled, with the overlap scheduler (the default; keep it) or without it.",
    )
    group.add_argument(
        "--engram-hot-cache-gb",
        type=float,
        default=0.0,
        metavar="N",
        help="GiB of device memory (per GPU, shared by its Engram tables) caching hot rows "
        "in front of dram or ssd tables (default 0 = none).",
    )
    # NOTE: plain float types: SGLang's parser would print its whole usage for a bad value;
    # startup_checks.check_startup refuses negative ones in one line. None = not given, so
    # that giving the RAM cache with another placement than ssd warns.
    group.add_argument(
        "--engram-ram-cache-gb",
        type=float,
        default=None,
        metavar="N",
        help="GiB of host memory (per GPU, shared by its Engram tables) caching rows of the "
        f"ssd placement (default {DEFAULT_RAM_CACHE_GB:g}; ssd only).",
    )

    group.add_argument(
        "--engram-ssd-read",
        default=None,
        metavar="STRATEGY",
        help="How the ssd placement reads rows from its files: mmap (default; through the "
        "page cache), pread (a thread pool, through the page cache) or direct (O_DIRECT "
        "in one AIO submission per lookup; the page cache is out of play, the RAM cache "
        "is the only cache).",
    )
    group.add_argument(
        "--engram-seed-profile",
        default=None,
        metavar="PATH",
        help="A row profile (python -m engram.profile MODEL CORPUS --out PATH) whose hottest "
        "rows fill each ssd table's RAM cache in the background at start-up, read in file "
        "order (ssd only; refused when it was made for another model or tokenizer).",
    )
    group.add_argument(
        "--engram-profile-out",
        default=None,
        metavar="PATH",
        help="Write the row profile of what this server serves (each ssd table's own count "
        "of the rows its lookups read, the most read 1 M per table) to PATH, in the format "
        "of python -m engram.profile: once lookups settle for 2 s, every 60 s under "
        "traffic and at shutdown, atomically; a later start seeds from it with "
        "--engram-seed-profile PATH. A TP rank writes its own rows to PATH with its "
        "shard's suffix (P.tp0of2.npz), merged by python -m engram.profile merge (ssd only).",
    )


def config_from_namespace(args: argparse.Namespace) -> EngramServerConfig:
    """The config the parsed flags describe (defaults where a flag is absent)."""
    offload = getattr(args, "engram_offload", None)
    return EngramServerConfig(
        offload=offload or DEFAULT_OFFLOAD,
        ssd_dir=getattr(args, "engram_ssd_dir", None),
        prefetch=bool(getattr(args, "engram_prefetch", True)),
        hot_cache_gb=float(getattr(args, "engram_hot_cache_gb", 0.0) or 0.0),
        ram_cache_gb=_given_float(getattr(args, "engram_ram_cache_gb", None)),
        ssd_read=getattr(args, "engram_ssd_read", None),
        seed_profile=getattr(args, "engram_seed_profile", None),
        profile_out=getattr(args, "engram_profile_out", None),
        role=str(getattr(args, "disaggregation_mode", None) or "null"),
        offload_explicit=offload is not None,
    )


def _given_float(value: Any) -> float | None:
    return None if value is None else float(value)


# ---- hooks (registered in hooks.py) -----------------------------------------------------


def add_cli_args_hook(result: Any, parser: argparse.ArgumentParser) -> None:
    """AFTER ``ServerArgs.add_cli_args(parser)``."""
    add_engram_args(parser)


def from_cli_args_hook(runtime: EngramRuntime) -> Callable[..., None]:
    """The AFTER hook on ``ServerArgs.from_cli_args(args)``: validate the flags, and
    carry the config to the scheduler processes and into ``runtime``."""

    def after(server_args: Any, cls: type, args: argparse.Namespace) -> None:
        configure(runtime, server_args, args)

    return after


def configure(runtime: EngramRuntime, server_args: Any, args: argparse.Namespace) -> None:
    """What :func:`from_cli_args_hook` does once SGLang has parsed ``args``."""
    from sglang_engram.args.graph_policy import graph_policy
    from sglang_engram.args.startup_checks import check_startup
    from sglang_engram.integration.cpu_serving import adjust_for_cpu, check_cpu_engine

    check_cpu_engine(server_args)
    for change in adjust_for_cpu(server_args):
        logger.info("sglang-engram: CPU engine: %s", change)
    config = config_from_namespace(args)
    family = runtime.model_facts(getattr(args, "model_path", None)).family
    try:
        changes: list[str] = []
        if family is not None and family.served:
            config, changes = family.configure_server(server_args, config)
        check_startup(
            runtime,
            config,
            model_path=getattr(args, "model_path", None),
            tp_size=int(getattr(args, "tp_size", 1) or 1),
            tokenizer_path=getattr(server_args, "tokenizer_path", None),
        )
    except EngramConfigError as exc:
        # NOTE: a one-line exit, before any process is spawned or weight loaded.
        raise SystemExit(f"sglang-engram: error: {exc}") from None
    for change in changes:
        logger.info("sglang-engram: %s: %s", family.title, change)
    config.export(server_args)
    runtime.use_config(config)
    graph_policy(server_args, config, family)
    served = (
        f"; {family.title}'s {family.tables} tables served by {family.implementation(config)}"
        if family is not None
        else ""
    )
    logger.info("%s%s", config.describe(), served)
