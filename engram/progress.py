"""Progress of a long command on stderr: a tqdm bar on a terminal, elsewhere (logs, CI)
one plain line every 10 s."""

from __future__ import annotations

import sys
from typing import Any, TextIO


def progress_bar(
    total: int, desc: str, *, unit: str = "it", show: bool = True, **options: Any
) -> Any:
    """A ``tqdm`` bar of ``total`` steps (``show=False``: one that prints nothing);
    ``options`` go to ``tqdm`` (``initial``, ``unit_scale``, ...)."""
    from tqdm import tqdm  # NOTE: imported here: serving tables never needs it

    tty = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr if tty else _Lines(sys.stderr),
        mininterval=0.1 if tty else 10.0,
        dynamic_ncols=tty,
        disable=not show,
        **options,
    )


class _Lines:
    """A stream for tqdm that turns its carriage-return redraws into whole lines."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> None:
        line = text.strip("\r\n ")
        if line:
            self._stream.write(line + "\n")

    def flush(self) -> None:
        self._stream.flush()
