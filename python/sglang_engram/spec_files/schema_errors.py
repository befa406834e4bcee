"""One line for a pydantic ``ValidationError`` of a YAML spec (cluster and sweep specs).

An unknown key is reported first, with the closest allowed key: a typo of a required key
(``transfer_backnd:``) also shows up as that key missing, and the typo is the cause.
"""

from __future__ import annotations

import difflib
import inspect
import re
from typing import Any, get_args

from pydantic import BaseModel, ValidationError


def first_error(
    exc: ValidationError, root: type[BaseModel], messages: dict[str, str] | None = None
) -> tuple[tuple[Any, ...], str, int]:
    """``(loc, message, how many other errors)`` of the error to report."""
    # NOTE: sorted() is stable, so pydantic's order holds among the rest.
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    err, *more = errors
    loc, kind = tuple(err["loc"]), err["type"]
    if kind == "extra_forbidden":
        model = model_at(root, loc[:-1])
        allowed = [k for k, f in _keys(model).items() if not f.exclude] if model else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        typo_of = [
            e for e in more if e["type"] == "missing" and tuple(e["loc"]) == (*loc[:-1], *close)
        ]
        if typo_of:
            more = [e for e in more if e not in typo_of]
            msg = f"unknown key (did you mean '{close[0]}'? it is required and missing)"
        else:
            msg = "unknown key" + (f" (did you mean '{close[0]}'?)" if close else "")
        if allowed:
            msg += f"; allowed keys: {', '.join(allowed)}"
    elif kind == "missing":
        msg = "required key is missing"
    elif kind == "value_error":
        msg = err["msg"].removeprefix("Value error, ")
    else:
        msg = f"{(messages or {}).get(kind, err['msg'])}, not {err.get('input')!r}"
        if kind == "literal_error":
            choices = re.findall(r"'([^']*)'", err["ctx"]["expected"])
            close = difflib.get_close_matches(str(err.get("input")), choices, n=1)
            msg += f" (did you mean '{close[0]}'?)" if close else ""
    return loc, msg, len(more)


def model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose keys sit at ``loc`` (list indices and union tags skipped)."""
    model = root
    for part in loc:
        field = _keys(model).get(part) if isinstance(part, str) else None
        if field is None:
            continue  # NOTE: a list index, or the union member pydantic tried ('str')
        found = _model_in(field.annotation)
        if found is None:
            return None
        model = found
    return model


def _keys(model: type[BaseModel]) -> dict[str, Any]:
    """The model's fields by the key a spec writes (the alias where there is one)."""
    return {f.alias or name: f for name, f in model.model_fields.items()}


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _model_in(arg)) is not None:
            return found
    return None
