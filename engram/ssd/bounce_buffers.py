"""Bounce buffers: host buffers that rows are gathered into on their way to the device.

On a GPU they are pinned, so the host-to-device copy is asynchronous; two buffers
alternate and one is reused only after its last copy finished (a CUDA event), so the
next lookup can gather while the previous copy is in flight. On a CPU device the rows
are dequantised straight from the (unpinned) buffer and one buffer suffices.
"""

from __future__ import annotations

import torch

MIN_ROWS = 1024


class BounceBuffers:
    def __init__(self, row_bytes: int, device: torch.device):
        self.row_bytes = row_bytes
        self.device = device
        self._pinned = device.type == "cuda"
        count = 2 if self._pinned else 1
        self._buffers: list[torch.Tensor | None] = [None] * count
        self._events: list[torch.cuda.Event | None] = [None] * count
        self._next = 0

    @property
    def nbytes(self) -> int:
        return sum(b.numel() for b in self._buffers if b is not None)

    def acquire(self, rows: int) -> tuple[int, torch.Tensor]:
        """A free buffer of at least ``rows`` rows: (its index, a ``[rows, row_bytes]`` view)."""
        index = self._next
        self._next = (index + 1) % len(self._buffers)
        event = self._events[index]
        if event is not None:
            event.synchronize()
            self._events[index] = None
        buffer = self._buffers[index]
        if buffer is None or buffer.shape[0] < rows:
            size = max(MIN_ROWS, 1 << (rows - 1).bit_length())
            buffer = torch.empty(
                (size, self.row_bytes), dtype=torch.uint8, device="cpu", pin_memory=self._pinned
            )
            self._buffers[index] = buffer
        return index, buffer[:rows]

    def to_device(self, index: int | None, rows: torch.Tensor) -> torch.Tensor:
        """``rows`` of buffer ``index`` (``None``: rows not in a bounce buffer) on the
        device; on a CPU device, the rows themselves."""
        if not self._pinned:
            return rows
        moved = rows.to(self.device, non_blocking=rows.is_pinned())
        if index is not None:
            event = torch.cuda.Event()
            event.record()
            self._events[index] = event
        return moved

    def release(self) -> None:
        self._buffers = [None] * len(self._buffers)
        self._events = [None] * len(self._events)
