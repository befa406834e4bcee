"""How long lookups take, without ever waiting for the GPU.

On the host a lookup's duration is its wall time. On a GPU the gather runs
asynchronously, so the host time would only measure the launch: a lookup records a
CUDA event before and after its work instead, and the duration is read once the end
event has completed -- at a later lookup, never by synchronising. Lookups captured in
a CUDA graph are not timed (a replay runs no Python to read the events).
"""

from __future__ import annotations

import time
from collections import deque

import torch

Mark = float | torch.cuda.Event | None


class LookupClock:
    def __init__(self, device: torch.device):
        self._gpu = device.type == "cuda"
        self._pending: deque[tuple[torch.cuda.Event, torch.cuda.Event]] = deque()

    def start(self) -> Mark:
        if not self._gpu:
            return time.perf_counter()
        if torch.cuda.is_current_stream_capturing():
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, mark: Mark) -> list[float]:
        """Durations (seconds) known now: this lookup's on the host; on a GPU, those of
        earlier lookups whose events have completed (this one's comes later)."""
        if isinstance(mark, float):
            return [time.perf_counter() - mark]
        if mark is None:
            return []  # NOTE: captured: even querying an event would break the capture
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._pending.append((mark, end))
        done = []
        while self._pending and self._pending[0][1].query():
            begin, end = self._pending.popleft()
            done.append(begin.elapsed_time(end) / 1000.0)
        return done
