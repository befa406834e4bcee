"""The rules of the ``--engram-*`` options, written once for the flags and the specs.

:func:`check` refuses a value or a combination with one line naming the option (as a
flag, or as a spec key) and returns the warnings for options the placement ignores.
The placement's traits (``engram.placements``) and each option's declaration
(``server_options``) say which option a placement uses, needs or refuses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from engram.errors import EngramConfigError
from engram.placements import having, placement_named
from sglang_engram.protocol.server_config import DEFAULT_OFFLOAD, OPTIONS
from sglang_engram.protocol.server_options import ServerOption, given

BY_NAME = {o.name: o for o in OPTIONS}


def check(
    values: Mapping[str, Any], *, flags: bool, tables: bool = True, role: str | None = None
) -> list[str]:
    """Raise :class:`EngramConfigError` for options that cannot work together; the
    warnings for those the placement ignores, and for a placement without tables where
    prompts are processed (``role``: "null", "prefill" or "decode"; None: unknown).
    ``values``: option name -> value (None: not given); ``flags``: name the options as
    flags, else as spec keys; ``tables``: False where the served model has no tables
    (only the values are checked then)."""
    name = {o.name: o.named(flags) for o in OPTIONS}
    placement = placement_named(values.get("offload") or DEFAULT_OFFLOAD)
    chosen = given(OPTIONS, values)
    for key, value in chosen.items():
        _check_value(BY_NAME[key], value, name[key])
    warnings = []
    for key, value in chosen.items():
        o = BY_NAME[key]
        if o.uses is None or getattr(placement, o.uses):
            continue
        served = " and ".join(having(o.uses))
        if o.refusal is not None:
            raise EngramConfigError(
                o.refusal.format(
                    option=name[key], value=value, placement=placement.name,
                    served=served, offload=name["offload"],
                )
            )  # fmt: skip
        warnings.append(
            f"{name[key]} is ignored with {name['offload']} {placement.name} (it applies to "
            f"{served} only)"
        )
    ram = chosen.get("ram_cache_gb")
    if "seed_profile" in chosen and ram == 0:
        raise EngramConfigError(
            f"{name['seed_profile']} {chosen['seed_profile']}: {name['ram_cache_gb']} "
            f"{ram:g} leaves no RAM cache to seed; give the cache some memory or leave the "
            "profile out"
        )
    if not tables:
        return []
    for o in OPTIONS:
        if o.required_by and getattr(placement, o.required_by) and o.name not in chosen:
            shown = f"{name[o.name]} {o.metavar}" if flags and o.metavar else name[o.name]
            raise EngramConfigError(f"{name['offload']} {placement.name} needs {shown} ({o.why})")
    if role not in (None, "decode") and not placement.holds_table:
        warnings.append(no_tables_warning(f"{name['offload']} {placement.name}", role))
    return warnings


def no_tables_warning(given: str, role: str) -> str:
    """What a placement without tables costs where a prompt's KV cache is computed: a
    prefill worker or a single server (``role`` "prefill" or "null")."""
    where = "single server" if role == "null" else f"{role} worker"
    return (
        f"{given} on a {where}: the n-gram tables are not loaded, so every prompt is "
        "processed without the model's n-gram memory and the KV cache differs from what the "
        "trained model computes (lower quality output). Use it on decode workers only, or "
        f"{'/'.join(having('holds_table'))} here."
    )


def _check_value(o: ServerOption, value: Any, shown: str) -> None:
    if o.minimum is not None and not (math.isfinite(value) and value >= o.minimum):
        raise EngramConfigError(f"{shown} must be >= {o.minimum:g}, got {value:g}")
    allowed = o.choices() if o.choices is not None else None
    if allowed is not None and value not in allowed:
        raise EngramConfigError(f"{shown} must be one of {', '.join(allowed)}, got {value!r}")
