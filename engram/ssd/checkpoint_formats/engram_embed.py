"""DeepSeek-V4.1's Engram tables (and the tiny model's): ``layers.{L}.engram.embed.weight``
/ ``.scale`` (DeepSeek-V4.1) or ``model.layers.{L}.engram.embed.weight`` / ``.scale``
(the tiny model), one 2-D tensor pair per layer, rows in ``e4m3-ue8m0``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from engram.errors import EngramTableError
from engram.fp8 import FP8_BLOCK
from engram.row_formats import E4m3Ue8m0Rows
from engram.spec import EngramSpec
from engram.ssd.checkpoint_formats.base import CheckpointFormat
from engram.ssd.safetensors_files import TensorEntry, TensorReader
from engram.ssd.sources import RowSource, sample_crc

TABLE_NAME = re.compile(r"^(?:model\.)?layers\.(\d+)\.engram\.embed\.(weight|scale)$")
WEIGHT_DTYPES = ("F8_E4M3", "U8")
SCALE_DTYPES = ("F8_E8M0", "U8")


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
        self.row_format = E4m3Ue8m0Rows(self.head_dim)
        self._identity: dict[str, Any] | None = None
        self._reader = TensorReader()

    def read(self, start: int, stop: int) -> np.ndarray:
        weight = self._reader.rows(self.weight, start, stop)
        return self.row_format.pack(weight, self._reader.rows(self.scale, start, stop))

    def describe(self) -> str:
        return f"layer {self.layer}'s table from {self.weight.file.parent}"

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


class EngramEmbedFormat(CheckpointFormat):
    name = "engram"
    family = "DeepSeek-V4.1 Engram (or the tiny Engram model)"
    pattern = "(model.)layers.{L}.engram.embed.weight / .scale"

    def claims(self, tensor: str) -> bool:
        return TABLE_NAME.match(tensor) is not None

    def tables(
        self, checkpoint: Path, entries: dict[str, TensorEntry], config: dict[str, Any] | None
    ) -> dict[int, RowSource]:
        parts: dict[int, dict[str, TensorEntry]] = {}
        for name, entry in entries.items():
            match = TABLE_NAME.match(name)
            if match:
                parts.setdefault(int(match.group(1)), {})[match.group(2)] = entry
        tables: dict[int, RowSource] = {}
        for layer, found in sorted(parts.items()):
            if set(found) != {"weight", "scale"}:
                have = ", ".join(e.name for e in found.values())
                raise EngramTableError(
                    f"Engram layer {layer} has only {have} (needs weight and scale)"
                )
            tables[layer] = SafetensorsRows(layer, found["weight"], found["scale"])
        if config is not None and config.get("engram_layer_ids"):
            _check_against_config(EngramSpec.from_hf_config(config), tables)
        return tables


def _check_against_config(spec: EngramSpec, tables: dict[int, RowSource]) -> None:
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
