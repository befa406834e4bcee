"""Skip Engram table tensors in the checkpoint before they are read.

With ``--engram-offload off`` (and for an ssd table already converted) the table
weights must cost neither host nor device memory, so their tensors are never
materialised: the safetensors iterator is wrapped to leave their names out.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

logger = logging.getLogger(__name__)

# NOTE: the table tensors of both the tiny model and DeepSeek-V4.1 end this way; the
# wkv projection and gate weights (".engram.wkv.", ".engram.q_weight") do not match.
TABLE_TENSOR = re.compile(r"\.engram\.embed\.(weight|scale)$")

_skip_lock = threading.Lock()
_skip_all_tables = False
_skip_layers: set[int] = set()
_LAYER = re.compile(r"layers\.(\d+)\.engram\.embed\.")


def skip_tables(*, all_tables: bool = False, layers: set[int] | None = None) -> None:
    """Tell the loader not to read these tables (called while the model is built)."""
    global _skip_all_tables
    with _skip_lock:
        _skip_all_tables = _skip_all_tables or all_tables
        _skip_layers.update(layers or ())


def reset_skips() -> None:
    global _skip_all_tables
    with _skip_lock:
        _skip_all_tables = False
        _skip_layers.clear()


def is_skipped(name: str) -> bool:
    if not TABLE_TENSOR.search(name):
        return False
    with _skip_lock:
        if _skip_all_tables:
            return True
        match = _LAYER.search(name)
        return match is not None and int(match.group(1)) in _skip_layers


def skip_engram_tables(
    original: Callable[..., Iterator[tuple[str, torch.Tensor]]],
    hf_weights_files: list[str],
    disable_mmap: bool = False,
    *args: Any,
    **kwargs: Any,
) -> Iterator[tuple[str, torch.Tensor]]:
    """AROUND ``safetensors_weights_iterator``: same tensors, minus skipped tables."""
    with _skip_lock:
        active = _skip_all_tables or bool(_skip_layers)
    if not active or disable_mmap:
        yield from original(hf_weights_files, disable_mmap, *args, **kwargs)
        return
    import safetensors

    skipped = 0
    for path in hf_weights_files:
        with safetensors.safe_open(path, framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                if is_skipped(name):
                    skipped += 1
                    continue
                yield name, f.get_tensor(name)
    logger.info("sglang-engram: left %d Engram table tensors unread", skipped)
