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

ENV_VAR = "SGLANG_ENGRAM_CONFIG"
# NOTE: underscore-prefixed, non-field names on ServerArgs are "bookkeeping": writable
# before and after resolution and carried through pickling.
SERVER_ARGS_ATTR = "_engram_config"

DEFAULT_OFFLOAD = "dram"
DEFAULT_RAM_CACHE_GB = 4.0
ROLES = ("null", "prefill", "decode")


@dataclass(frozen=True)
class EngramServerConfig:
    """The Engram placement of one server (every scheduler of it)."""

    offload: str = DEFAULT_OFFLOAD
    ssd_dir: str | None = None
    prefetch: bool = True
    hot_cache_gb: float = 0.0
    # None: not given (the ssd placement then uses DEFAULT_RAM_CACHE_GB).
    ram_cache_gb: float | None = None
    # None: not given (the ssd placement then reads with engram.ssd.readers.DEFAULT_READER).
    ssd_read: str | None = None
    # a row profile (engram.profile) seeding the ssd tables' RAM caches; None: no seeding
    seed_profile: str | None = None
    # where the ssd tables write the profile of what they served; None: not written
    profile_out: str | None = None
    # SGLang's --disaggregation-mode: "null" (single server), "prefill" or "decode".
    role: str = "null"
    # True when --engram-offload was given on the command line (not the default).
    offload_explicit: bool = False

    @property
    def enabled(self) -> bool:
        """False when Engram is off: no table is loaded and the layers pass through."""
        return self.offload != "off"

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
        extra = []
        if self.offload == "ssd":
            extra.append(f"dir={self.ssd_dir} ram_cache={self.ram_cache_gb_or_default:g} GiB")
            if self.ssd_read:
                extra.append(f"read={self.ssd_read}")
            if self.seed_profile:
                extra.append(f"seed_profile={self.seed_profile}")
            if self.profile_out:
                extra.append(f"profile_out={self.profile_out}")
        if self.offload in ("dram", "ssd") and self.hot_cache_gb:
            extra.append(f"hot_cache={self.hot_cache_gb:g} GiB")
        if self.enabled:
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
