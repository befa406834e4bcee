"""Start the Engram lookups of a batch early, on a side stream.

The hash ids of every Engram layer depend only on the batch's token ids, so all
lookups can start before layer 0 runs; each Engram layer then waits only for its
own rows. Without a GPU (or with ``--no-engram-prefetch``) each lookup runs where
its layer needs it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Lookup = Callable[[], torch.Tensor]


class PendingRows:
    """Rows of one layer: already launched on the side stream, or computed on demand."""

    def __init__(self, lookup: Lookup, stream: torch.cuda.Stream | None):
        self._lookup = lookup
        self._rows: torch.Tensor | None = None
        self._event: torch.cuda.Event | None = None
        if stream is not None:
            with torch.cuda.stream(stream):
                self._rows = lookup()
                self._event = torch.cuda.Event()
                self._event.record(stream)

    def wait(self) -> torch.Tensor:
        if self._rows is None:
            return self._lookup()
        current = torch.cuda.current_stream()
        assert self._event is not None
        current.wait_event(self._event)
        # NOTE: the rows were allocated on the side stream; tell the caching
        # allocator they are in use on this one too before they can be freed.
        self._rows.record_stream(current)
        return self._rows


class EarlyLookups:
    def __init__(self, enabled: bool, device: torch.device):
        self.enabled = enabled
        self.stream = (
            torch.cuda.Stream(device=device) if enabled and device.type == "cuda" else None
        )

    @property
    def active(self) -> bool:
        return self.stream is not None

    def start(self, lookups: list[Lookup]) -> list[PendingRows]:
        if self.stream is not None:
            # The side stream must see the hash ids the current stream produced.
            self.stream.wait_stream(torch.cuda.current_stream())
        return [PendingRows(lookup, self.stream) for lookup in lookups]
