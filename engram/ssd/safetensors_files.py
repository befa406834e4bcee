"""A checkpoint's safetensors files: what tensors they hold, and row ranges read from them.

Tensors are found and read with ``safetensors.safe_open(...).get_slice``: a read copies
only the rows asked for out of the file's mapping, so a table never has to fit in
memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engram.errors import EngramTableError


@dataclass(frozen=True)
class TensorEntry:
    file: Path
    name: str
    dtype: str  # safetensors' name: F8_E4M3, BF16, U8, ...
    shape: tuple[int, ...]


def open_file(path: Path) -> Any:
    from safetensors import SafetensorError, safe_open  # not needed to serve tables

    # NOTE: safetensors maps the whole file (torch, copy-on-write), and under the kernel's
    # default overcommit rule a file larger than RAM + swap cannot be mapped. SGLang's
    # loader maps every checkpoint file the same way, so this adds no limit of its own;
    # its ``pread`` backend is no way out: it reads a whole tensor to slice it.
    try:
        return safe_open(str(path), framework="pt")
    except (SafetensorError, OSError, RuntimeError) as err:
        raise EngramTableError(f"cannot read the safetensors file {path}: {err}") from err


def read_entries(path: Path) -> dict[str, TensorEntry]:
    """Name, dtype and shape of every tensor in one safetensors file."""
    with open_file(path) as f:
        slices = {name: f.get_slice(name) for name in f.keys()}
        return {
            name: TensorEntry(path, name, s.get_dtype(), tuple(s.get_shape()))
            for name, s in slices.items()
        }


def checkpoint_entries(checkpoint: Path) -> dict[str, TensorEntry]:
    """Every tensor of the checkpoint directory ``checkpoint``, by name."""
    if not checkpoint.is_dir():
        what = "is not a directory" if checkpoint.exists() else "does not exist"
        raise EngramTableError(f"checkpoint directory {checkpoint} {what}")
    files = sorted(checkpoint.glob("*.safetensors"))
    if not files:
        raise EngramTableError(f"no *.safetensors files in checkpoint directory {checkpoint}")
    entries: dict[str, TensorEntry] = {}
    for path in files:
        entries.update(read_entries(path))
    return entries


class TensorReader:
    """Row ranges of checkpoint tensors, one open handle per file."""

    def __init__(self) -> None:
        # NOTE: one open file per table and file: opening parses the header, which a
        # sharded checkpoint repeats for thousands of tensors.
        self._files: dict[Path, Any] = {}

    def rows(self, entry: TensorEntry, start: int, stop: int) -> torch.Tensor:
        """Rows ``[start, stop)`` of ``entry``, a torch tensor of the checkpoint's dtype."""
        from safetensors import SafetensorError

        try:
            return self._handle(entry).get_slice(entry.name)[start:stop]
        except SafetensorError as err:
            raise EngramTableError(f"{entry.file}: reading rows of {entry.name}: {err}") from err

    def whole(self, entry: TensorEntry) -> torch.Tensor:
        """A small tensor whole (a scale, a buffer)."""
        from safetensors import SafetensorError

        try:
            return self._handle(entry).get_tensor(entry.name)
        except SafetensorError as err:
            raise EngramTableError(f"{entry.file}: reading {entry.name}: {err}") from err

    def _handle(self, entry: TensorEntry) -> Any:
        handle = self._files.get(entry.file)
        if handle is None:
            handle = self._files[entry.file] = open_file(entry.file)
        return handle
