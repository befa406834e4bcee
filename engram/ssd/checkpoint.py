"""The Engram tables inside a safetensors checkpoint, read in row ranges.

Tensors are found and read with ``safetensors.safe_open(...).get_slice``: a read copies
only the rows asked for out of the file's mapping, so a table never has to fit in
memory. Table names: ``layers.{L}.engram.embed.weight`` / ``.scale`` (DeepSeek-V4.1) or
``model.layers.{L}.engram.embed.weight`` / ``.scale`` (the tiny model).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

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


def _open(path: Path) -> Any:
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
    with _open(path) as f:
        slices = {name: f.get_slice(name) for name in f.keys()}
        return {
            name: TensorEntry(path, name, s.get_dtype(), tuple(s.get_shape()))
            for name, s in slices.items()
        }


class SafetensorsRows:
    """One layer's table (weight + scale tensors) streamed from a checkpoint."""

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
        self._identity: dict[str, Any] | None = None
        self._files: dict[Path, Any] = {}

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        return self._read_rows(self.weight, start, stop), self._read_rows(self.scale, start, stop)

    def _read_rows(self, entry: TensorEntry, start: int, stop: int) -> np.ndarray:
        # NOTE: one open file per table and file: opening parses the header, which a
        # sharded checkpoint repeats for thousands of tensors.
        handle = self._files.get(entry.file)
        if handle is None:
            handle = self._files[entry.file] = _open(entry.file)
        from safetensors import SafetensorError

        try:
            rows = handle.get_slice(entry.name)[start:stop]
        except SafetensorError as err:
            raise EngramTableError(f"{entry.file}: reading rows of {entry.name}: {err}") from err
        return rows.view(torch.uint8).numpy()

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            self._identity = {
                "kind": "safetensors",
                "weight": self.weight.name,
                "scale": self.scale.name,
                "file": self.weight.file.name,
                "rows": self.num_rows,
                "head_dim": self.head_dim,
                "sample_crc32": sample_crc(self),
            }
        return self._identity


def find_tables(checkpoint: Path) -> dict[int, SafetensorsRows]:
    """Every Engram table in ``checkpoint`` (a directory of ``*.safetensors``), by layer;
    checked against ``config.json``'s ``engram_*`` fields when it has them."""
    if not checkpoint.is_dir():
        what = "is not a directory" if checkpoint.exists() else "does not exist"
        raise EngramTableError(f"checkpoint directory {checkpoint} {what}")
    files = sorted(checkpoint.glob("*.safetensors"))
    if not files:
        raise EngramTableError(f"no *.safetensors files in checkpoint directory {checkpoint}")
    parts: dict[int, dict[str, TensorEntry]] = {}
    for path in files:
        for name, entry in read_entries(path).items():
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
