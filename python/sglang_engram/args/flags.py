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
from typing import Any

from engram.errors import EngramConfigError
from engram.placements import DECLARED, placement_names
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.protocol.server_config import OPTIONS, EngramServerConfig

logger = logging.getLogger(__name__)

# NOTE: every option string add_engram_args defines (the cluster launcher manages them);
# made from the declared options, as the parser is.
ENGRAM_FLAGS = tuple(
    f
    for o in OPTIONS
    for f in (o.flag, *([o.flag.replace("--", "--no-", 1)] if o.kind is bool else []))
)


def placement_choices() -> list[str]:
    """The placements the core library registers (engram.placements)."""
    return placement_names()


def add_engram_args(parser: argparse.ArgumentParser) -> None:
    """Add the Engram flags, one per declared option (``EngramServerConfig``), to
    ``parser`` (once; a second call is a no-op)."""
    if any(OPTIONS[0].flag in a.option_strings for a in parser._actions):
        return
    group = parser.add_argument_group(
        "Engram (sglang-engram plugin)",
        "Where the Engram n-gram tables live. Applies to Engram models only; the same "
        "flags serve prefill and decode workers of a disaggregated deployment.",
    )
    placements = "; ".join(f"{p.name}: {p.summary}" for p in DECLARED.values())
    for o in OPTIONS:
        # NOTE: every default is None (not given), so that the rules can tell an option
        # given from the default; numbers are plain floats (SGLang's parser would print
        # its whole usage for a bad value): option_rules.check refuses them in one line.
        kwargs: dict[str, Any] = {
            "default": None,
            "help": o.help.replace("{placements}", placements),
        }
        if o.kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["metavar"] = o.metavar
            kwargs["type"] = o.kind
        if o.listed and o.choices is not None:
            kwargs["choices"] = o.choices()
            del kwargs["metavar"]
        group.add_argument(o.flag, **kwargs)


def config_from_namespace(args: argparse.Namespace) -> EngramServerConfig:
    """The config the parsed flags describe (defaults where a flag is absent)."""
    values = {o.name: getattr(args, "engram_" + o.name, None) for o in OPTIONS}
    return EngramServerConfig(
        **{k: v for k, v in values.items() if v is not None},
        role=str(getattr(args, "disaggregation_mode", None) or "null"),
        offload_explicit=values["offload"] is not None,
    )


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
