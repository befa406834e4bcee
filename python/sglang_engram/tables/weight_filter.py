"""Skip table tensors in the checkpoint before they are read.

With ``--engram-offload off`` and ``ssd`` the table rows must cost neither host nor
device memory, so their tensors are never materialised: every safetensors iterator of
SGLang is wrapped to leave them out. Which tensors hold table rows, and of which layer,
each model family says (:func:`sglang_engram.protocol.registry.table_tensor_layer`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Any

import torch

from sglang_engram.protocol.registry import table_tensor_layer
from sglang_engram.protocol.runtime import EngramRuntime, SkipState

logger = logging.getLogger(__name__)


def skip_tables(
    state: SkipState, *, all_tables: bool = False, layers: set[int] | None = None
) -> None:
    """Tell the loader not to read these tables (called while the model is built).

    NOTE: the skips last as long as the process serves the model (a reload from disk
    skips the same tables); ``EngramRuntime.reset`` forgets them."""
    with state.lock:
        state.all_tables = state.all_tables or all_tables
        state.layers.update(layers or ())


def is_skipped(state: SkipState, name: str) -> bool:
    layer = table_tensor_layer(name)
    if layer is None:
        return False
    with state.lock:
        return state.all_tables or layer in state.layers


def _active(state: SkipState) -> bool:
    with state.lock:
        return state.all_tables or bool(state.layers)


def _holds_tables(path: str) -> bool:
    """Whether a safetensors file holds any table tensor (reads its header)."""
    import safetensors

    with safetensors.safe_open(path, framework="pt", device="cpu") as f:
        return any(table_tensor_layer(name) is not None for name in f.keys())  # noqa: SIM118


def _kept_tensors(state: SkipState, path: str) -> tuple[list[tuple[str, torch.Tensor]], int]:
    """The tensors of one safetensors file that are not skipped (the skipped ones are
    never read), and how many were skipped."""
    import safetensors

    kept, skipped = [], 0
    with safetensors.safe_open(path, framework="pt", device="cpu") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
            if is_skipped(state, name):
                skipped += 1
            else:
                kept.append((name, f.get_tensor(name)))
    return kept, skipped


def _filtered(
    state: SkipState, files: list[str], workers: int
) -> Iterator[tuple[str, torch.Tensor]]:
    """Every kept tensor of ``files``, in file order; ``workers`` files are read ahead
    at a time (as SGLang's multi-thread loader does)."""
    skipped = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        remaining = iter(files)
        window = deque(pool.submit(_kept_tensors, state, p) for p in islice(remaining, workers))
        while window:
            kept, count = window.popleft().result()
            following = next(remaining, None)
            if following is not None:
                window.append(pool.submit(_kept_tensors, state, following))
            skipped += count
            yield from kept
    logger.info("sglang-engram: left %d table tensors unread", skipped)


def skip_engram_tables(runtime: EngramRuntime) -> Callable[..., Iterator[tuple[str, torch.Tensor]]]:
    """The AROUND hook for each of SGLang's safetensors iterators (single- and
    multi-threaded, with or without ``--weight-loader-disable-mmap``, ``fastsafetensors``,
    ``instanttensor``), leaving out the tables this process's runtime skips: the same
    tensors, minus the skipped tables.

    Files without Engram tables go to the original iterator with its options; files
    holding them are read here, tensor by tensor, leaving the skipped ones unread.
    NOTE: those files are opened with ``safe_open`` (mmap) even when mmap is disabled:
    the non-mmap loaders read a file whole, tables included. The split depends only on
    the files, so every rank of a collective loader (fastsafetensors, instanttensor)
    hands it the same list."""

    def around(
        original: Callable[..., Iterator[tuple[str, torch.Tensor]]],
        hf_weights_files: list[str],
        *args: Any,
        **kwargs: Any,
    ) -> Iterator[tuple[str, torch.Tensor]]:
        state = runtime.skips
        if not _active(state):
            yield from original(hf_weights_files, *args, **kwargs)
            return
        with_tables = [path for path in hf_weights_files if _holds_tables(path)]
        others = [path for path in hf_weights_files if path not in with_tables]
        if others:
            yield from original(others, *args, **kwargs)
        yield from _filtered(state, with_tables, int(kwargs.get("max_workers") or 1))

    return around
