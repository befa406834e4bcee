"""The ``engram_*`` keys of a spec file (cluster workers, sweep launches), made from the
declared server options (``protocol/server_options.py``) and checked by their one
``check()``: a new option is a new key here without an edit.

NOTE: imports no torch; the allowed placements are the registered declarations
(``engram.placements``), read when a spec is checked.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from engram.errors import EngramConfigError
from engram.placements import placement_names
from sglang_engram.protocol.option_rules import BY_NAME, check
from sglang_engram.protocol.server_config import DEFAULT_OFFLOAD, OPTIONS
from sglang_engram.protocol.server_options import render_flags

OFFLOAD = BY_NAME["offload"].key


def yaml_off(value: Any) -> Any:
    """YAML 1.1 reads a bare ``off`` as false; as a placement it means "off"."""
    return "off" if value is False else value


def one_of(value: Any, allowed: list[str]) -> Any:
    """``value`` if it is one of ``allowed``, else pydantic's own error for a choice."""
    if value is not None and value not in allowed:
        *rest, last = [repr(a) for a in allowed]
        expected = f"{', '.join(rest)} or {last}" if rest else last
        raise PydanticCustomError(
            "literal_error", "Input should be {expected}", {"expected": expected}
        )
    return value


def placement_key(value: Any) -> Any:
    """A spec's placement: a registered one (``off`` written bare too)."""
    return one_of(yaml_off(value), placement_names())


def _choice(cls: type, value: Any, info: ValidationInfo) -> Any:
    assert info.field_name is not None
    option = BY_NAME[info.field_name.removeprefix("engram_")]
    assert option.choices is not None
    return one_of(value, option.choices())


def _rules(self: EngramKeys) -> EngramKeys:
    try:
        check(self.engram_values(), flags=False)
    except EngramConfigError as exc:
        raise ValueError(str(exc)) from None
    return self


def engram_keys(base: type[BaseModel], name: str) -> type[EngramKeys]:
    """``base`` with one key per declared option: the placement (default
    ``DEFAULT_OFFLOAD``, always passed on) and the rest optional (None: the server's
    default)."""
    fields: dict[str, Any] = {OFFLOAD: (str, DEFAULT_OFFLOAD)}
    for o in OPTIONS[1:]:
        bound = {} if o.minimum is None else {"ge": o.minimum}
        fields[o.key] = (o.kind | None, Field(None, **bound))
    validators = {
        "_yaml_off": field_validator(OFFLOAD, mode="before")(lambda cls, v: yaml_off(v)),
        "_choices": field_validator(*(o.key for o in OPTIONS if o.choices))(_choice),
        "_rules": model_validator(mode="after")(_rules),
    }
    keys = create_model(name + "Keys", __base__=base, __validators__=validators, **fields)
    return type(name, (keys, EngramKeys), {})


class EngramKeys:
    """What a model made by :func:`engram_keys` answers besides its keys."""

    def engram_values(self) -> dict[str, Any]:
        """Option name -> value (None: not set)."""
        return {o.name: getattr(self, o.key) for o in OPTIONS}

    @property
    def engram_flags(self) -> list[str]:
        """The plugin's flags for these keys (only those the spec sets, and the placement)."""
        return render_flags(OPTIONS, self.engram_values())

    def engram_warnings(self, role: str | None = None) -> list[str]:
        """The options the placement ignores and, for a server of ``role``, a placement
        without tables where prompts are processed: one line each."""
        return check(self.engram_values(), flags=False, role=role)
