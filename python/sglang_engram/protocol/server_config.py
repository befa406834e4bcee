"""What the ``--engram-*`` flags ask for, and how it reaches every SGLang process.

The launcher parses the flags into an :class:`EngramServerConfig`. It travels to the
scheduler processes two ways, both of which survive SGLang's ``spawn``:

* on the ``ServerArgs`` record, as bookkeeping (``ServerArgs.__reduce__`` pickles the
  record's ``__dict__`` along with its fields), and
* in the environment (``SGLANG_ENGRAM_CONFIG``, JSON), which child processes inherit,
  so an ``Engine`` built without the CLI can be configured the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from engram.files import GIB
from engram.placements import Placement, placement_named, placement_names
from engram.ssd.read_strategies import READ_STRATEGIES
from sglang_engram.protocol.server_options import option, options_of, render_flags

ENV_VAR = "SGLANG_ENGRAM_CONFIG"
# NOTE: underscore-prefixed, non-field names on ServerArgs are "bookkeeping": writable
# before and after resolution and carried through pickling.
SERVER_ARGS_ATTR = "_engram_config"

DEFAULT_OFFLOAD = "dram"
DEFAULT_RAM_CACHE_GB = 4.0
ROLES = ("null", "prefill", "decode")


@dataclass(frozen=True)
class EngramServerConfig:
    """The Engram placement of one server (every scheduler of it). The fields declared
    with ``option`` are the ``--engram-*`` options (``server_options``); their help is
    the flags' ``--help``."""

    offload: str = option(
        DEFAULT_OFFLOAD,
        f"Placement of the Engram tables (default {DEFAULT_OFFLOAD} for every role). "
        "{placements}.",
        choices=placement_names,
        listed=True,
    )
    ssd_dir: str | None = option(
        None,
        "Directory for the ssd placement's table files (required with --engram-offload "
        "ssd); converted from the checkpoint on first start, reused afterwards.",
        metavar="PATH",
        uses="files",
        required_by="files",
        why="a directory on a local SSD where the tables are converted on first start",
    )
    prefetch: bool = option(
        True,
        "Read Engram rows ahead of the layer that needs them: the tiny model's hbm/dram "
        "lookups start on a side stream as soon as the batch's token ids are known "
        "(DeepSeek-V4.1 keeps upstream's schedule); ssd tables read a request's rows from disk "
        "when it is queued and the next decode step's rows as soon as a step's tokens are "
        "sampled, with the overlap scheduler (the default; keep it) or without it.",
        uses="holds_table",
    )
    hot_cache_gb: float = option(
        0.0,
        "GiB of device memory (per GPU, shared by its Engram tables) caching hot rows "
        "in front of dram or ssd tables (default 0 = none).",
        metavar="N",
        uses="hot_cache",
        minimum=0.0,
    )
    # None: not given (the ssd placement then uses DEFAULT_RAM_CACHE_GB).
    ram_cache_gb: float | None = option(
        None,
        "GiB of host memory (per GPU, shared by its Engram tables) caching rows of the "
        f"ssd placement (default {DEFAULT_RAM_CACHE_GB:g}; ssd only).",
        metavar="N",
        uses="ram_cache",
        minimum=0.0,
    )
    # None: not given (the ssd placement then reads with engram.ssd.readers.DEFAULT_READER).
    ssd_read: str | None = option(
        None,
        "How the ssd placement reads rows from its files: mmap (default; through the "
        "page cache), pread (a thread pool, through the page cache) or direct (O_DIRECT "
        "in one AIO submission per lookup; the page cache is out of play, the RAM cache "
        "is the only cache).",
        metavar="STRATEGY",
        uses="files",
        choices=lambda: list(READ_STRATEGIES),
    )
    # a row profile (engram.profile) seeding the ssd tables' RAM caches; None: no seeding
    seed_profile: str | None = option(
        None,
        "A row profile (python -m engram.profile MODEL CORPUS --out PATH) whose hottest "
        "rows fill each ssd table's RAM cache in the background at start-up, read in file "
        "order (ssd only; refused when it was made for another model or tokenizer).",
        metavar="PATH",
        uses="seeds",
        refusal="{option} {value} seeds the RAM cache of {served} tables, but this server's "
        "placement is {placement}; pass {offload} {served} or leave the profile out",
    )
    # where the ssd tables write the profile of what they served; None: not written
    profile_out: str | None = option(
        None,
        "Write the row profile of what this server serves (each ssd table's own count "
        "of the rows its lookups read, the most read 1 M per table) to PATH, in the format "
        "of python -m engram.profile: once lookups settle for 2 s, every 60 s under "
        "traffic and at shutdown, atomically; a later start seeds from it with "
        "--engram-seed-profile PATH. A TP rank writes its own rows to PATH with its "
        "shard's suffix (P.tp0of2.npz), merged by python -m engram.profile merge (ssd only).",
        metavar="PATH",
        uses="seeds",
        refusal="{option} {value} writes the rows {served} tables served, but this server's "
        "placement is {placement}; pass {offload} {served} or leave it out",
    )
    # SGLang's --disaggregation-mode: "null" (single server), "prefill" or "decode".
    role: str = "null"
    # True when --engram-offload was given on the command line (not the default).
    offload_explicit: bool = False

    @property
    def placement(self) -> Placement:
        """What the placement is (its traits)."""
        return placement_named(self.offload)

    def option_values(self) -> dict[str, Any]:
        """Option name -> value, for ``option_rules.check``."""
        return {o.name: getattr(self, o.name) for o in OPTIONS}

    @property
    def enabled(self) -> bool:
        """False when Engram is off: no table is loaded and the layers pass through."""
        return self.placement.holds_table

    @property
    def hot_cache_bytes(self) -> int:
        return int(self.hot_cache_gb * GIB)

    @property
    def ram_cache_bytes(self) -> int:
        return int(self.ram_cache_gb_or_default * GIB)

    @property
    def ram_cache_gb_or_default(self) -> float:
        return DEFAULT_RAM_CACHE_GB if self.ram_cache_gb is None else self.ram_cache_gb

    @property
    def role_name(self) -> str:
        return "single server" if self.role == "null" else f"{self.role} worker"

    def describe(self) -> str:
        placement, extra = self.placement, []
        if placement.files:
            ram = f" ram_cache={self.ram_cache_gb_or_default:g} GiB" if placement.ram_cache else ""
            extra.append(f"dir={self.ssd_dir}{ram}")
        if placement.files and self.ssd_read:
            extra.append(f"read={self.ssd_read}")
        if placement.seeds and self.seed_profile:
            extra.append(f"seed_profile={self.seed_profile}")
        if placement.seeds and self.profile_out:
            extra.append(f"profile_out={self.profile_out}")
        if placement.hot_cache and self.hot_cache_gb:
            extra.append(f"hot_cache={self.hot_cache_gb:g} GiB")
        if placement.holds_table:
            extra.append(f"prefetch={'on' if self.prefetch else 'off'}")
        tail = f" ({', '.join(extra)})" if extra else ""
        return f"Engram placement for this {self.role_name}: {self.offload}{tail}"

    # ---- carrying it across processes --------------------------------------------------

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EngramServerConfig:
        data: dict[str, Any] = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def export(self, server_args: Any | None = None) -> None:
        """Make this config visible to the processes SGLang starts from here."""
        os.environ[ENV_VAR] = self.to_json()
        if server_args is not None:
            setattr(server_args, SERVER_ARGS_ATTR, self)


OPTIONS = options_of(EngramServerConfig)


def engram_flags(**values: Any) -> list[str]:
    """The ``--engram-*`` flags asking a server for ``values`` (option names as keywords,
    e.g. ``offload="ssd", ssd_dir=PATH``; None: the server's default)."""
    return render_flags(OPTIONS, values)


def config_of(server_args: Any | None) -> EngramServerConfig | None:
    """The config carried by ``server_args`` or, failing that, the environment."""
    carried = getattr(server_args, SERVER_ARGS_ATTR, None) if server_args is not None else None
    if isinstance(carried, EngramServerConfig):
        return carried
    text = os.environ.get(ENV_VAR)
    return EngramServerConfig.from_json(text) if text else None


def config_from_sglang() -> EngramServerConfig:
    """The config of this SGLang process, from what SGLang published: the config carried
    on its ``ServerArgs`` or in the environment, else the defaults with the role read
    from SGLang's runtime context (a server started without our flags parsed: ``Engine``).

    NOTE: this is where the config crosses into a scheduler process; the runtime calls
    it once, while the model is built, inside the published context."""
    server_args = None
    role = "null"
    try:
        from sglang.srt.runtime_context import get_disagg, get_server_args

        server_args = get_server_args()
        role = str(get_disagg().disaggregation_mode or "null")
    except Exception:  # noqa: BLE001 - no published context (tests, tools)
        pass
    found = config_of(server_args)
    if found is not None:
        return found
    return EngramServerConfig(role=role if role in ROLES else "null")
