"""A dependency-free progress bar for long conversions (stderr).

On a terminal it redraws one line; otherwise (logs, CI) it prints a line every
``log_every`` seconds so a long conversion still shows it is alive.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

GIB = 1 << 30


class Progress:
    def __init__(
        self, total: int, label: str, *, stream: TextIO | None = None, log_every: float = 10.0
    ):
        self.total = max(1, total)
        self.label = label
        self.done = 0
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._start = time.monotonic()
        self._last = 0.0
        self._log_every = log_every

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if (self._tty and now - self._last >= 0.1) or now - self._last >= self._log_every:
            self._last = now
            self._draw(now)

    def finish(self) -> None:
        self._draw(time.monotonic())
        if self._tty:
            self._stream.write("\n")
        self._stream.flush()

    def _draw(self, now: float) -> None:
        frac = min(1.0, self.done / self.total)
        elapsed = max(now - self._start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        bar = "#" * int(frac * 30)
        line = (
            f"{self.label} [{bar:<30}] {frac:6.1%} {self.done / GIB:7.2f}/"
            f"{self.total / GIB:.2f} GiB {rate / (1 << 20):7.1f} MiB/s ETA {_clock(eta)}"
        )
        self._stream.write(("\r" + line) if self._tty else line + "\n")
        self._stream.flush()


def _clock(seconds: float) -> str:
    if seconds == float("inf"):
        return "--:--"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
