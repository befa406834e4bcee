"""The Engram tables inside a safetensors checkpoint, read in row ranges.

The safetensors header is parsed here directly (8-byte length, JSON, then raw tensor
bytes), so rows stream from the file with ``pread`` whatever their FP8 dtype and a
table never has to fit in memory. Table names: ``layers.{L}.engram.embed.weight`` /
``.scale`` (DeepSeek-V4.1) or ``model.layers.{L}.engram.embed.weight`` / ``.scale``
(the tiny model).
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engram.errors import EngramTableError
from engram.spec import FP8_BLOCK, EngramSpec
from engram.ssd.sources import sample_crc

TABLE_NAME = re.compile(r"^(?:model\.)?layers\.(\d+)\.engram\.embed\.(weight|scale)$")
WEIGHT_DTYPES = ("F8_E4M3", "U8")
SCALE_DTYPES = ("F8_E8M0", "U8")


@dataclass(frozen=True)
class TensorEntry:
    file: Path
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int  # absolute byte offset of the tensor's data in ``file``
    nbytes: int


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Tensor entries of one safetensors file; raises naming the file if malformed."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise EngramTableError(f"{path} is not a safetensors file (shorter than 8 bytes)")
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, 1 << 30):
            raise EngramTableError(f"{path} is not a safetensors file (header length {length})")
        try:
            header = json.loads(f.read(length))
        except ValueError as err:
            raise EngramTableError(f"{path}: unreadable safetensors header: {err}") from err
    base = 8 + length
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if base + end > size:
            raise EngramTableError(
                f"{path} is truncated: tensor {name} ends at byte {base + end:,} of {size:,}"
            )
        entries[name] = TensorEntry(
            path, name, info["dtype"], tuple(info["shape"]), base + begin, end - begin
        )
    return entries


class SafetensorsRows:
    """One layer's table (weight + scale tensors) streamed from a checkpoint file."""

    def __init__(self, layer: int, weight: TensorEntry, scale: TensorEntry):
        self.layer = layer
        self.weight, self.scale = weight, scale
        for entry, allowed in ((weight, WEIGHT_DTYPES), (scale, SCALE_DTYPES)):
            if entry.dtype not in allowed or len(entry.shape) != 2:
                raise EngramTableError(
                    f"checkpoint tensor {entry.name} is {entry.dtype} {list(entry.shape)}; an "
                    f"Engram table needs a 2-D {' or '.join(allowed)} tensor"
                )
        self.num_rows, self.head_dim = weight.shape
        if self.head_dim % FP8_BLOCK or scale.shape != (self.num_rows, self.head_dim // FP8_BLOCK):
            raise EngramTableError(
                f"checkpoint tensor {scale.name} is {list(scale.shape)}, expected "
                f"[{self.num_rows}, {self.head_dim // FP8_BLOCK}] for {weight.name} "
                f"{list(weight.shape)}"
            )

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        return (
            _read_rows(self.weight, self.head_dim, start, stop),
            _read_rows(self.scale, self.head_dim // FP8_BLOCK, start, stop),
        )

    def identity(self) -> dict[str, Any]:
        return {
            "kind": "safetensors",
            "weight": self.weight.name,
            "scale": self.scale.name,
            "file": self.weight.file.name,
            "rows": self.num_rows,
            "head_dim": self.head_dim,
            "sample_crc32": sample_crc(self),
        }


def _read_rows(entry: TensorEntry, width: int, start: int, stop: int) -> np.ndarray:
    want = (stop - start) * width
    with open(entry.file, "rb", buffering=0) as f:
        data = os.pread(f.fileno(), want, entry.offset + start * width)
    if len(data) != want:
        raise EngramTableError(f"{entry.file} ended while reading rows of {entry.name}")
    return np.frombuffer(data, dtype=np.uint8).reshape(stop - start, width)


def find_tables(checkpoint: Path) -> dict[int, SafetensorsRows]:
    """Every Engram table in ``checkpoint`` (a directory of ``*.safetensors``), by layer;
    checked against ``config.json``'s ``engram_*`` fields when it has them."""
    files = sorted(checkpoint.glob("*.safetensors"))
    if not files:
        raise EngramTableError(f"no *.safetensors files in checkpoint directory {checkpoint}")
    parts: dict[int, dict[str, TensorEntry]] = {}
    for path in files:
        for name, entry in read_header(path).items():
            match = TABLE_NAME.match(name)
            if match:
                parts.setdefault(int(match.group(1)), {})[match.group(2)] = entry
    tables = {}
    for layer, found in sorted(parts.items()):
        if set(found) != {"weight", "scale"}:
            have = ", ".join(e.name for e in found.values())
            raise EngramTableError(f"Engram layer {layer} has only {have} (needs weight and scale)")
        tables[layer] = SafetensorsRows(layer, found["weight"], found["scale"])
    _check_against_config(checkpoint, tables)
    if not tables:
        raise EngramTableError(f"checkpoint {checkpoint} has no Engram tables (*.engram.embed.*)")
    return tables


def checkpoint_identity(checkpoint: Path, tables: dict[int, SafetensorsRows]) -> dict[str, Any]:
    """Names and sizes of the checkpoint's files plus the tables' own identities."""
    files = sorted(checkpoint.glob("*.safetensors"))
    return {
        "kind": "checkpoint",
        "files": [{"name": p.name, "bytes": p.stat().st_size} for p in files],
        "tables": {str(layer): rows.identity() for layer, rows in tables.items()},
    }


def _check_against_config(checkpoint: Path, tables: dict[int, SafetensorsRows]) -> None:
    config_path = checkpoint / "config.json"
    if not config_path.exists():
        return
    config = json.loads(config_path.read_text())
    if not config.get("engram_layer_ids"):
        return
    spec = EngramSpec.from_hf_config(config)
    for layer, rows in zip(spec.layer_ids, spec.num_embeddings, strict=True):
        table = tables.get(layer)
        if table is None:
            raise EngramTableError(
                f"config.json declares Engram layer {layer} but the checkpoint has no table for it"
            )
        if table.head_dim != spec.head_dim:
            raise EngramTableError(
                f"Engram layer {layer}'s table rows are {table.head_dim} wide but "
                f"engram_head_dim is {spec.head_dim}"
            )
        if table.num_rows != rows:
            raise EngramTableError(
                f"Engram layer {layer}'s table has {table.num_rows:,} rows but "
                f"engram_num_embeddings says {rows:,}"
            )
    extra = sorted(set(tables) - set(spec.layer_ids))
    if extra:
        raise EngramTableError(
            f"checkpoint has Engram tables for layers {extra} not in config.json"
        )
