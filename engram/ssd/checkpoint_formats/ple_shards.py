"""Qwen3.8-Flash-Next's PLE n-gram tables (SGLang's ``qwen4_exp``), as upstream loads them.

One table per PLE layer, written as ``split_ngram_parts`` (default 512) row shards
``model.language_model.layers.{L}.ple.ple_embedding.ngram_embedding.shard_{k}.weight``
(or without ``language_model.``, as upstream maps both): shard ``k`` holds rows
``[k * ceil(N / parts), ...)`` of the ``N``-row table, ``N`` being the sum of the layer's
prime bucket sizes padded to ``make_ngram_vocab_size_divisible_by``. A plain
``...ngram_embedding.weight`` is refused, as upstream refuses it. The rows' format:

- ``F8_E4M3`` shards: ``e4m3-tensor-scale`` with the table's
  ``...ngram_embedding.weight_scale`` (bf16, 1.0 when absent, as upstream's buffer);
- ``BF16`` (or other float) shards: ``bf16`` times that scale, unless the config asks
  for fp8 storage (``ple_embedding_dtype: float8_e4m3fn``, an fp8 quantisation config):
  then ``e4m3-tensor-scale`` holding torch's downcast, what upstream's storage holds.

The table's row count is checked three ways: the shards' shapes, the checkpoint's
``ngram_heads_vocab_sizes`` buffer and the primes ``config.json`` implies.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from engram.errors import EngramTableError
from engram.row_formats import Bf16Rows, E4m3TensorScaleRows, RowFormat, bf16_bits
from engram.ssd.checkpoint_formats.base import CheckpointFormat
from engram.ssd.checkpoint_formats.ple_config import PleConfig, padded_rows
from engram.ssd.safetensors_files import TensorEntry, TensorReader
from engram.ssd.sources import RowSource, format_identity, sample_crc

_PREFIX = r"^model\.(?:language_model\.)?layers\.(\d+)\.ple\.ple_embedding\."
SHARD = re.compile(_PREFIX + r"ngram_embedding\.shard_(\d+)\.weight$")
PLAIN = re.compile(_PREFIX + r"ngram_embedding\.weight$")
SCALE = re.compile(_PREFIX + r"ngram_embedding\.weight_scale$")
HEAD_SIZES = re.compile(_PREFIX + r"ngram_heads_vocab_sizes$")
FLOAT_DTYPES = ("F8_E4M3", "BF16", "F16", "F32")


class PleShardRows:
    """One PLE layer's table, streamed by row range from its shard tensors."""

    def __init__(
        self,
        layer: int,
        shards: dict[int, TensorEntry],
        parts: int,
        num_rows: int,
        row_format: RowFormat,
    ):
        self.layer = layer
        self.num_rows, self.head_dim = num_rows, row_format.head_dim
        self.row_format = row_format
        self.parts = parts
        self._shards, self._shard_rows = shards, -(-num_rows // parts)
        self._reader = TensorReader()
        self._identity: dict[str, Any] | None = None

    def read(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((stop - start, self.row_format.row_bytes), dtype=np.uint8)
        size = self._shard_rows
        for k in range(start // size, -(-stop // size)):
            lo, hi = max(start, k * size), min(stop, (k + 1) * size)
            rows = self._reader.rows(self._shards[k], lo - k * size, hi - k * size)
            out[lo - start : hi - start] = self.row_format.pack(rows)
        return out

    def describe(self) -> str:
        return f"layer {self.layer}'s table from {self._shards[0].file.parent}"

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            first = self._shards[0]
            self._identity = {
                "kind": "safetensors-ple",
                "weight": first.name.replace(".shard_0.", ".shard_*."),
                "split_ngram_parts": self.parts,
                "files": sorted({e.file.name for e in self._shards.values()}),
                "checkpoint_dtype": first.dtype,
                "rows": self.num_rows,
                "head_dim": self.head_dim,
                **format_identity(self.row_format),
                "sample_crc32": sample_crc(self),
            }
        return self._identity


class PleShardsFormat(CheckpointFormat):
    name = "qwen4-exp-ple"
    family = "Qwen3.8-Flash-Next PLE (qwen4_exp)"
    pattern = "model.language_model.layers.{L}.ple.ple_embedding.ngram_embedding.shard_{k}.weight"

    def claims(self, tensor: str) -> bool:
        return SHARD.match(tensor) is not None or PLAIN.match(tensor) is not None

    def tables(
        self, checkpoint: Path, entries: dict[str, TensorEntry], config: dict[str, Any] | None
    ) -> dict[int, RowSource]:
        for name in entries:
            if PLAIN.match(name):
                raise EngramTableError(
                    f"unsupported PLE weight layout {name}: SGLang loads the table only from "
                    "its ngram_embedding.shard_{k}.weight shards"
                )
        ple = PleConfig.from_config(config)
        shards = _layer_shards(entries)
        if config is not None and ple.ple_layer_ids and set(shards) != set(ple.layer_ids):
            raise EngramTableError(
                f"config.json's ple_layer_ids {list(ple.ple_layer_ids)} are decoder layers "
                f"{list(ple.layer_ids)}, but the checkpoint has PLE tables for {sorted(shards)}"
            )
        reader = TensorReader()
        tables: dict[int, RowSource] = {}
        for layer, found in sorted(shards.items()):
            num_rows = _table_rows(layer, found, entries, ple, reader)
            row_format = _row_format(layer, found, entries, ple, reader)
            if ple.head_dim is not None and row_format.head_dim != ple.head_dim:
                raise EngramTableError(
                    f"PLE layer {layer}'s rows are {row_format.head_dim} wide but config.json "
                    f"implies {ple.head_dim} (ple_embed_dim {ple.ple_embed_dim} over "
                    f"{ple.ngram_heads} n-gram heads)"
                )
            tables[layer] = PleShardRows(layer, found, ple.split_ngram_parts, num_rows, row_format)
        return tables


def _layer_shards(entries: dict[str, TensorEntry]) -> dict[int, dict[int, TensorEntry]]:
    shards: dict[int, dict[int, TensorEntry]] = {}
    for name, entry in entries.items():
        match = SHARD.match(name)
        if match is None:
            continue
        layer, k = int(match.group(1)), int(match.group(2))
        twin = shards.setdefault(layer, {}).setdefault(k, entry)
        if twin is not entry:
            raise EngramTableError(f"PLE layer {layer} has shard {k} twice: {twin.name}, {name}")
        if entry.dtype not in FLOAT_DTYPES or len(entry.shape) != 2:
            raise EngramTableError(
                f"checkpoint tensor {name} is {entry.dtype} {list(entry.shape)}; a PLE table "
                f"shard is a 2-D {' or '.join(FLOAT_DTYPES)} tensor"
            )
    for layer, found in shards.items():
        first = found[min(found)]
        for entry in found.values():
            if (entry.dtype, entry.shape[1]) != (first.dtype, first.shape[1]):
                raise EngramTableError(
                    f"PLE layer {layer}'s shards differ: {first.name} is {first.dtype} "
                    f"{list(first.shape)}, {entry.name} is {entry.dtype} {list(entry.shape)}"
                )
    return shards


def _table_rows(
    layer: int,
    found: dict[int, TensorEntry],
    entries: dict[str, TensorEntry],
    ple: PleConfig,
    reader: TensorReader,
) -> int:
    """The rows of the table: what the checkpoint's ``ngram_heads_vocab_sizes`` buffer
    and ``config.json`` say (they must agree), else what the shards hold; every shard
    then holds its share."""
    parts = ple.split_ngram_parts
    if max(found) >= parts:
        raise EngramTableError(
            f"PLE layer {layer} has shard_{max(found)} but split_ngram_parts is {parts} "
            "(config.json's text_config, default 512)"
        )
    said = {}
    sizes = _find(HEAD_SIZES, layer, entries)
    if sizes is not None:
        said[f"its {sizes.name}"] = padded_rows(reader.whole(sizes).tolist(), ple.divisible_by)
    if layer in ple.layer_ids:
        said["config.json's n-gram fields"] = ple.num_rows(layer)
    if len(set(said.values())) > 1:
        raise EngramTableError(
            f"PLE layer {layer}'s table size disagrees: "
            + ", ".join(f"{who} make {rows:,} rows" for who, rows in said.items())
        )
    num_rows = next(iter(said.values()), sum(e.shape[0] for e in found.values()))
    shard_rows = -(-num_rows // parts)
    for k in range(parts):
        want = max(0, min(shard_rows, num_rows - k * shard_rows))
        have = found[k].shape[0] if k in found else 0
        if have != want:
            raise EngramTableError(
                f"PLE layer {layer}'s shard_{k} has {have:,} rows, but {parts} shards "
                f"of a {num_rows:,}-row table give it {want:,} (split_ngram_parts "
                f"{parts}: shard k holds rows from k * {shard_rows:,})"
            )
    return num_rows


def _row_format(
    layer: int,
    found: dict[int, TensorEntry],
    entries: dict[str, TensorEntry],
    ple: PleConfig,
    reader: TensorReader,
) -> RowFormat:
    first = found[min(found)]
    scale_entry = _find(SCALE, layer, entries)
    scale_bits = 0x3F80  # upstream's weight_scale buffer starts at 1.0
    if scale_entry is not None:
        if scale_entry.shape != (1,):
            raise EngramTableError(
                f"{scale_entry.name} is {list(scale_entry.shape)}; SGLang loads a [1] scale"
            )
        scale_bits = bf16_bits(reader.whole(scale_entry))
    if first.dtype == "F8_E4M3" or ple.fp8_storage:
        return E4m3TensorScaleRows(first.shape[1], scale_bits)
    if (ple.quant_method or "").startswith("modelopt"):
        # NOTE: upstream asks a ModelOpt mixed-precision config per module whether the
        # table is fp8; that answer is not read here.
        raise EngramTableError(
            f"PLE layer {layer}'s shards are {first.dtype} under a {ple.quant_method!r} "
            "quantisation config, which may store the table in fp8: not supported"
        )
    return Bf16Rows(first.shape[1], scale_bits)


def _find(
    pattern: re.Pattern[str], layer: int, entries: dict[str, TensorEntry]
) -> TensorEntry | None:
    """The tensor of ``layer`` that ``pattern`` names, or ``None``."""
    hits = [e for n, e in entries.items() if (m := pattern.match(n)) and int(m.group(1)) == layer]
    if len(hits) > 1:
        raise EngramTableError(f"PLE layer {layer} has {' and '.join(e.name for e in hits)}")
    return hits[0] if hits else None
