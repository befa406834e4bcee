"""Write a safetensors file in one streaming pass, tensor by tensor, chunk by chunk.

NOTE: the ``safetensors`` package only saves tensors that are whole in memory; a model
with tables of many GiB cannot be built that way on a machine with less RAM. The format
is simple, so it is written here: an 8-byte little-endian header length, the JSON
header (name -> dtype, shape, ``data_offsets`` into the data, plus ``__metadata__``),
padded with spaces to a multiple of 8, then every tensor's raw little-endian bytes in
header order, with no gaps. ``safetensors.safe_open`` and SGLang's loader read the
result like any other safetensors file.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import torch

from engram.errors import EngramConfigError
from engram.files import atomic_write

# torch dtype -> (safetensors dtype name, bytes per element)
DTYPES: dict[torch.dtype, tuple[str, int]] = {
    torch.bfloat16: ("BF16", 2),
    torch.float32: ("F32", 4),
    torch.int64: ("I64", 8),
    torch.uint8: ("U8", 1),
    torch.float8_e4m3fn: ("F8_E4M3", 1),
    torch.float8_e8m0fnu: ("F8_E8M0", 1),
}
HEADER_ALIGN = 8

Chunks = Callable[[], Iterable[np.ndarray | bytes]]


@dataclass(frozen=True)
class StreamedTensor:
    """One tensor of the file: its name, dtype, shape, and a function giving its bytes
    in order (any number of chunks whose sizes add up to the tensor's)."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    chunks: Chunks

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPES[self.dtype][1]

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor) -> StreamedTensor:
        """A tensor already in memory (its bytes as one chunk)."""
        t = tensor.detach().cpu().contiguous()
        return cls(name, t.dtype, tuple(t.shape), lambda: [t.view(torch.uint8).numpy()])


def header_bytes(tensors: list[StreamedTensor], metadata: dict[str, str]) -> bytes:
    """The length-prefixed, padded JSON header for ``tensors`` in this order."""
    header: dict[str, object] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for t in tensors:
        if t.dtype not in DTYPES:
            raise EngramConfigError(f"safetensors writer: unsupported dtype {t.dtype} ({t.name})")
        end = offset + t.nbytes
        header[t.name] = {
            "dtype": DTYPES[t.dtype][0],
            "shape": list(t.shape),
            "data_offsets": [offset, end],
        }
        offset = end
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % HEADER_ALIGN)
    return struct.pack("<Q", len(text)) + text


def write_safetensors(
    path: str | Path,
    tensors: list[StreamedTensor],
    metadata: dict[str, str] | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> int:
    """Write ``tensors`` to ``path`` atomically (a killed write leaves no file);
    ``on_bytes`` is told the size of every chunk written. Returns the file size."""
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise EngramConfigError("safetensors writer: tensor names repeat")
    head = header_bytes(tensors, metadata or {})

    def body(f: IO[bytes]) -> None:
        f.write(head)
        for t in tensors:
            written = 0
            for chunk in _as_bytes(t.chunks()):
                f.write(chunk)
                written += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
            if written != t.nbytes:
                raise EngramConfigError(
                    f"safetensors writer: {t.name} gave {written:,} bytes, its shape "
                    f"needs {t.nbytes:,}"
                )

    atomic_write(path, body)
    return len(head) + sum(t.nbytes for t in tensors)


def _as_bytes(chunks: Iterable[np.ndarray | bytes]) -> Iterator[memoryview]:
    for chunk in chunks:
        if isinstance(chunk, np.ndarray):
            chunk = np.ascontiguousarray(chunk).view(np.uint8).reshape(-1)
        yield memoryview(chunk).cast("B")
