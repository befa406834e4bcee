"""Rows read by the gather, counted on the device and read back without stalling.

The gather kernels add the number of rows they actually read (after dedup) to
``UniqueCounter.total``, a device int64. :meth:`UniqueCounter.take` hands the tables'
``TableCounters`` what was counted since the last call: on a GPU it starts an
asynchronous copy into pinned memory and reports what the previous copy brought once
its event has completed, so a lookup never waits for the GPU (the figure lags by at
most a few lookups; once the device is idle, two calls bring it up to date).
"""

from __future__ import annotations

import torch


class UniqueCounter:
    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.total = torch.zeros(1, dtype=torch.int64, device=self.device)
        on_gpu = self.device.type != "cpu"
        self._host = torch.zeros(1, dtype=torch.int64, device="cpu", pin_memory=on_gpu)
        self._event: torch.cuda.Event | None = None
        self._reported = 0
        self._scratch: UniqueCounter | None = None

    @property
    def scratch(self) -> UniqueCounter:
        """A counter on the same device that nobody reads: kernels that must count
        (to stay the same compiled variant) but whose rows must not be reported."""
        if self._scratch is None:
            self._scratch = UniqueCounter(self.device)
        return self._scratch

    def take(self) -> int:
        """Rows counted since the last ``take`` that can be read without waiting."""
        if self.device.type == "cpu":
            return self._advance(int(self.total[0]))
        if self._event is not None and not self._event.query():
            return 0
        seen = int(self._host[0]) if self._event is not None else self._reported
        self._host.copy_(self.total, non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record()
        return self._advance(seen)

    def _advance(self, seen: int) -> int:
        delta, self._reported = seen - self._reported, seen
        return delta
