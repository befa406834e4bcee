"""How one ``--engram-*`` server option is declared, and what is made from the declarations.

Each option is a field of :class:`~sglang_engram.protocol.server_config.EngramServerConfig`
declared with :func:`option`: its name, type, default, help and the placement trait
(``engram.placements``) it applies to. From those fields come the command-line flags
(``args/flags.py``), the cluster spec's worker keys and the sweep spec's launch keys
(``spec_files/engram_keys.py``), the flag list a launcher passes (:func:`render_flags`)
and the one set of rules (``protocol/option_rules.py``). A new option is one field.

Names: the field ``ssd_dir`` is the flag ``--engram-ssd-dir`` and the spec key
``engram_ssd_dir``. NOTE: imports no torch (specs and launchers read it).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any

OPTION = "engram_option"  # the dataclass field metadata key


@dataclass(frozen=True)
class ServerOption:
    """One option. ``default`` is the config's value when the option is not given."""

    name: str
    kind: type  # str, float or bool
    default: Any
    help: str
    metavar: str | None = None
    # the placement trait (an ``engram.placements.Placement`` field) the option applies
    # to; None: every placement. Given with another placement it is ignored (a warning),
    # or refused with ``refusal`` (a template of {option} {value} {placement} {served}
    # {offload}) where it would mislead.
    uses: str | None = None
    refusal: str | None = None
    # the trait of the placements that cannot do without it, and what it is to them
    required_by: str | None = None
    why: str = ""
    minimum: float | None = None
    # the allowed values (None: any); the command line lists them only when ``listed``
    choices: Callable[[], list[str]] | None = None
    listed: bool = False

    @property
    def flag(self) -> str:
        return "--engram-" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """The spec files' key (cluster workers, sweep launches)."""
        return "engram_" + self.name

    def named(self, flags: bool) -> str:
        return self.flag if flags else self.key


def option(default: Any, help: str, **declared: Any) -> Any:
    """A config field declaring a server option (``ServerOption``'s keywords)."""
    return dataclasses.field(default=default, metadata={OPTION: (help, declared)})


def options_of(config_class: type) -> tuple[ServerOption, ...]:
    """The options declared by ``config_class``'s fields, in field order."""
    hints = typing.get_type_hints(config_class)
    found = []
    for f in dataclasses.fields(config_class):
        if OPTION in f.metadata:
            help, declared = f.metadata[OPTION]
            found.append(ServerOption(f.name, _kind(hints[f.name]), f.default, help, **declared))
    return tuple(found)


def _kind(hint: Any) -> type:
    if isinstance(hint, UnionType):
        (hint,) = [a for a in typing.get_args(hint) if a is not NoneType]
    return hint


def given(options: tuple[ServerOption, ...], values: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``values`` (option name -> value, None: not given) set to something
    other than their default."""
    return {
        o.name: values[o.name]
        for o in options
        if values.get(o.name) is not None and values[o.name] != o.default
    }


def render_flags(options: tuple[ServerOption, ...], values: Mapping[str, Any]) -> list[str]:
    """The flags that ask a server for ``values`` (option name -> value; None and absent
    names are left to the server's defaults), in declaration order."""
    unknown = set(values) - {o.name for o in options}
    if unknown:
        raise ValueError(f"no server option named {', '.join(sorted(unknown))}")
    flags: list[str] = []
    for o in options:
        value = values.get(o.name)
        if value is None:
            continue
        if o.kind is bool:
            flags.append(o.flag if value else o.flag.replace("--", "--no-", 1))
        else:
            flags += [o.flag, f"{value:g}" if o.kind is float else str(value)]
    return flags
