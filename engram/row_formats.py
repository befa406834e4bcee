"""How one table row is stored, and how it becomes bf16: the row formats, by name.

A table's rows are fixed-size byte strings (``row_bytes`` each, the unit the SSD layout,
the caches and the readers move around without looking inside). A :class:`RowFormat`
says how many bytes a row of ``head_dim`` values takes, how checkpoint tensors become
those bytes (:meth:`RowFormat.pack`) and how packed rows become bf16
(:meth:`RowFormat.dequantize`), bit-identical to what upstream SGLang's own gather
returns for the same rows:

- ``e4m3-ue8m0`` (DeepSeek-V4.1's Engram, the tiny model): ``head_dim`` e4m3 bytes and
  one ue8m0 exponent byte per 32 values (:mod:`engram.fp8`).
- ``e4m3-tensor-scale`` (Qwen3.8-Flash-Next's fp8 PLE table): ``head_dim`` e4m3 bytes;
  one bf16 scale for the whole table, applied after the gather as upstream's
  ``embeddings * weight_scale``: ``bf16(e4m3) * scale`` in bf16, one rounding.
- ``bf16`` (the bf16 PLE table): ``head_dim`` bf16 values (``2 * head_dim`` bytes), times
  the table's bf16 scale as upstream does (1.0 unless the checkpoint carries one).

NaN comes out as the one bf16 NaN ``0x7FC0`` in every format (torch's own casts and
multiplies give other NaN bits depending on the CPU and on where a value falls in a
vectorised loop); every other value is bit-identical to upstream's.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from engram import fp8
from engram.errors import EngramTableError

BF16_ONE_BITS = 0x3F80


def bf16_bits(value: torch.Tensor) -> int:
    """The 16 bits of a one-element tensor cast to bf16 as upstream's buffer copy does."""
    flat = value.detach().reshape(-1)
    if flat.numel() != 1:
        raise EngramTableError(f"a table scale has one value, got shape {list(value.shape)}")
    return int(flat.to("cpu", torch.bfloat16).view(torch.int16).item()) & 0xFFFF


def bf16_value(bits: int) -> float:
    """The float a bf16 bit pattern stands for."""
    raw = np.array([bits & 0xFFFF], dtype=np.uint16).view(np.int16)
    return float(torch.from_numpy(raw).view(torch.bfloat16))


def canonical_nan(values: torch.Tensor) -> torch.Tensor:
    """``values`` (bf16) with every NaN as ``0x7FC0``, in place."""
    values.view(torch.int16).masked_fill_(values.isnan(), fp8.BF16_NAN_BITS)
    return values


@dataclass(frozen=True)
class RowFormat(ABC):
    """The storage of one table's rows of ``head_dim`` values."""

    head_dim: int

    name: ClassVar[str]
    # NOTE: the dtypes a table manifest records for the format (values, scales).
    weight_dtype: ClassVar[str]
    scale_dtype: ClassVar[str]

    def __post_init__(self) -> None:
        if self.head_dim < 1:
            raise EngramTableError(f"table rows need at least one value, got {self.head_dim}")

    @classmethod
    @abstractmethod
    def row_bytes_of(cls, head_dim: int) -> int:
        """Bytes of one packed row of ``head_dim`` values (the one row-size formula)."""

    @classmethod
    def check_head_dim(cls, head_dim: int) -> None:
        """Raise unless rows of ``head_dim`` values can be stored in this format."""
        if head_dim < 1:
            raise EngramTableError(f"table rows need at least one value, got {head_dim}")

    @property
    def row_bytes(self) -> int:
        return self.row_bytes_of(self.head_dim)

    @abstractmethod
    def pack(self, weight: torch.Tensor, scale: torch.Tensor | None = None) -> np.ndarray:
        """Checkpoint rows ``weight`` [k, head_dim] (and per-row ``scale`` where the
        format has one) as packed uint8 rows ``[k, row_bytes]``."""

    @abstractmethod
    def dequantize(self, packed: torch.Tensor) -> torch.Tensor:
        """Packed uint8 rows ``[..., row_bytes]`` -> bf16 ``[..., head_dim]``, on their device."""

    def params(self) -> dict[str, Any]:
        """What the format needs besides its name and ``head_dim`` (manifest, identity)."""
        return {}

    def describe(self) -> str:
        return f"{self.name}, {self.head_dim} values = {self.row_bytes} B a row"


@dataclass(frozen=True)
class E4m3Ue8m0Rows(RowFormat):
    """e4m3 values, then one ue8m0 exponent byte per 32 values (:mod:`engram.fp8`)."""

    name: ClassVar[str] = "e4m3-ue8m0"
    weight_dtype: ClassVar[str] = "float8_e4m3fn"
    scale_dtype: ClassVar[str] = "float8_e8m0fnu"

    @classmethod
    def row_bytes_of(cls, head_dim: int) -> int:
        return fp8.row_bytes(head_dim)

    @classmethod
    def check_head_dim(cls, head_dim: int) -> None:
        if head_dim < fp8.FP8_BLOCK or head_dim % fp8.FP8_BLOCK:
            raise EngramTableError(
                f"table rows must be a positive multiple of {fp8.FP8_BLOCK} wide, got {head_dim}"
            )

    def pack(self, weight: torch.Tensor, scale: torch.Tensor | None = None) -> np.ndarray:
        if scale is None:
            raise EngramTableError(f"{self.name} rows need their exponent bytes (scale)")
        return fp8.pack_rows(weight, scale).numpy()

    def dequantize(self, packed: torch.Tensor) -> torch.Tensor:
        return fp8.dequantize_rows(*fp8.unpack_rows(packed, self.head_dim))


@dataclass(frozen=True)
class _TableScaledRows(RowFormat):
    """Values of one dtype times one bf16 scale per table (upstream's ``weight_scale``)."""

    scale_bf16_bits: int = BF16_ONE_BITS

    value_dtype: ClassVar[torch.dtype]
    scale_dtype: ClassVar[str] = "bfloat16"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.scale_bf16_bits <= 0xFFFF:
            raise EngramTableError(f"a bf16 table scale is 16 bits, got {self.scale_bf16_bits:#x}")
        if not math.isfinite(self.scale):
            raise EngramTableError(
                f"the table scale is {self.scale} (bf16 bits {self.scale_bf16_bits:#06x}): "
                "every row would dequantise to NaN or infinity"
            )

    @classmethod
    def row_bytes_of(cls, head_dim: int) -> int:
        return head_dim * cls.value_dtype.itemsize

    @property
    def scale(self) -> float:
        return bf16_value(self.scale_bf16_bits)

    def pack(self, weight: torch.Tensor, scale: torch.Tensor | None = None) -> np.ndarray:
        if scale is not None:
            raise EngramTableError(f"{self.name} rows have no per-row scales")
        if weight.ndim != 2 or weight.shape[1] != self.head_dim:
            raise EngramTableError(
                f"{self.name} rows must be [k, {self.head_dim}], got {list(weight.shape)}"
            )
        if weight.dtype == torch.uint8 and self.value_dtype.itemsize == 1:
            values = weight  # the values' bytes already
        elif weight.dtype.is_floating_point:
            # NOTE: torch's cast, as upstream's loader copies a checkpoint shard into
            # its storage (``loaded_weight.to(dtype)``): a bf16 checkpoint served from
            # fp8 storage is this (lossy) downcast.
            values = weight.to(self.value_dtype)
        else:
            raise EngramTableError(f"{self.name} rows cannot be packed from {weight.dtype}")
        return values.contiguous().view(torch.uint8).reshape(weight.shape[0], -1).numpy()

    def dequantize(self, packed: torch.Tensor) -> torch.Tensor:
        values = packed.view(self.value_dtype).to(torch.bfloat16)
        # NOTE: a Python float multiplies in the same float opmath as upstream's bf16
        # [1] tensor (the scale is a bf16 value, exact in float): one rounding, the same
        # bits, and no tensor to move to the device per lookup.
        return canonical_nan(values * self.scale)

    def params(self) -> dict[str, Any]:
        return {"scale_bf16_bits": self.scale_bf16_bits}

    def describe(self) -> str:
        return f"{super().describe()}, table scale {self.scale:g}"


@dataclass(frozen=True)
class E4m3TensorScaleRows(_TableScaledRows):
    """e4m3 values, one bf16 scale for the whole table."""

    name: ClassVar[str] = "e4m3-tensor-scale"
    weight_dtype: ClassVar[str] = "float8_e4m3fn"
    value_dtype: ClassVar[torch.dtype] = torch.float8_e4m3fn


@dataclass(frozen=True)
class Bf16Rows(_TableScaledRows):
    """bf16 values, one bf16 scale for the whole table (1.0 unless the checkpoint has one)."""

    name: ClassVar[str] = "bf16"
    weight_dtype: ClassVar[str] = "bfloat16"
    value_dtype: ClassVar[torch.dtype] = torch.bfloat16


# NOTE: name -> format class; the name is what a table manifest records.
ROW_FORMATS: dict[str, type[RowFormat]] = {
    cls.name: cls for cls in (E4m3Ue8m0Rows, E4m3TensorScaleRows, Bf16Rows)
}
DEFAULT_ROW_FORMAT = E4m3Ue8m0Rows.name


def row_format_class(name: str) -> type[RowFormat]:
    try:
        return ROW_FORMATS[name]
    except KeyError:
        raise EngramTableError(
            f"unknown row format {name!r}; this build knows {', '.join(ROW_FORMATS)}"
        ) from None


def row_format(name: str, head_dim: int, params: dict[str, Any] | None = None) -> RowFormat:
    """The format ``name`` for rows of ``head_dim`` values, with its ``params()``."""
    cls = row_format_class(name)
    try:
        return cls(head_dim, **(params or {}))
    except TypeError as err:
        raise EngramTableError(f"row format {name!r}: bad parameters {params}: {err}") from err
