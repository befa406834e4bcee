"""Progress of a long command on stderr: a tqdm bar on a terminal, elsewhere (logs, CI)
one plain line every 10 s."""

from __future__ import annotations

import sys
from typing import Any, TextIO


def progress_bar(
    total: int, desc: str, *, unit: str = "it", unit_scale: bool = False, show: bool = True
) -> Any:
    """A ``tqdm`` bar of ``total`` steps (``unit_scale``: shown as k, M, G ...;
    ``show=False``: one that prints nothing)."""
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit_scale,
        file=sys.stderr if tty else _Lines(sys.stderr),
        mininterval=0.1 if tty else 10.0,
        dynamic_ncols=tty,
        disable=not show,
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
