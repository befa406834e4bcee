"""The interface every table placement implements, and its lookup counters.

Counts, one word each: a table's ``counters`` (:class:`TableCounters`) count every
lookup cumulatively; ``stats()`` (of the counters, or of a table for the counts its
placement keeps besides) is a snapshot of them as a plain dict.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch

from engram.errors import EngramInputError, EngramTableError
from engram.fp8 import FP8_BLOCK, as_uint8
from engram.placements import Placement
from engram.row_formats import E4m3Ue8m0Rows, RowFormat
from engram.rows.read_ahead import ReadAheadHandle
from engram.tables.timing import LookupClock

if TYPE_CHECKING:
    from engram.profile.tally import RowTally
    from engram.tables.options import TableOptions


@dataclass
class TableCounters:
    """Cumulative lookup statistics of one table (read by the plugin's metrics)."""

    lookups: int = 0
    rows_requested: int = 0
    unique_rows: int = 0
    bytes_read: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    # NOTE: told each lookup duration once it is known (the plugin's latency histogram).
    # Readers attach here and take deltas of ``stats()``; the counters object itself is
    # never replaced, so no lookup can be recorded into an object nobody reads any more.
    on_duration: Callable[[float], None] | None = field(default=None, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(
        self, rows: int, unique: int, tier_bytes: dict[str, int], seconds: list[float]
    ) -> None:
        """One lookup; ``seconds`` holds the lookup durations known now (on a GPU they
        arrive a few lookups late: see :mod:`engram.tables.timing`)."""
        with self._lock:
            self.lookups += 1
            self.rows_requested += rows
            self.unique_rows += unique
            for tier, n in tier_bytes.items():
                self.bytes_read[tier] = self.bytes_read.get(tier, 0) + n
            self.seconds += sum(seconds)
        if self.on_duration is not None:
            for duration in seconds:
                self.on_duration(duration)

    def stats(self) -> dict[str, object]:
        """A snapshot of the counters."""
        with self._lock:
            return {
                "lookups": self.lookups,
                "rows_requested": self.rows_requested,
                "unique_rows": self.unique_rows,
                "bytes_read": dict(self.bytes_read),
                "seconds": self.seconds,
            }


def check_table_arrays(
    weight: torch.Tensor,
    scale: torch.Tensor,
    head_dim: int | None,
    num_rows: int | None = None,
) -> None:
    """Raise naming the mismatch when (weight, scale) is not an FP8 table of
    ``num_rows`` rows of ``head_dim`` (``None``: any)."""
    if weight.dtype not in (torch.uint8, torch.float8_e4m3fn):
        raise EngramTableError(f"table weight must be uint8 or float8_e4m3fn, got {weight.dtype}")
    if scale.dtype not in (torch.uint8, torch.float8_e8m0fnu):
        raise EngramTableError(f"table scale must be uint8 or float8_e8m0fnu, got {scale.dtype}")
    if weight.ndim != 2 or scale.ndim != 2:
        raise EngramTableError(
            f"table weight and scale must be 2-D, got {list(weight.shape)} and {list(scale.shape)}"
        )
    rows, dim = weight.shape
    if head_dim is not None and dim != head_dim:
        raise EngramTableError(f"table rows are {dim} wide but the spec's head_dim is {head_dim}")
    if num_rows is not None and rows != num_rows:
        raise EngramTableError(f"the table has {rows:,} rows but the spec expects {num_rows:,}")
    if dim % FP8_BLOCK or tuple(scale.shape) != (rows, dim // FP8_BLOCK):
        raise EngramTableError(
            f"table scale is {list(scale.shape)}, expected [{rows}, {dim // FP8_BLOCK}] "
            f"for weight {list(weight.shape)}"
        )


class EngramTable(ABC):
    """One Engram layer's table in some placement.

    ``lookup(row_ids)`` returns bf16 rows ``[*row_ids.shape, head_dim]`` on ``device``;
    every placement returns bit-identical rows for the same ids. A placement is a
    subclass registered by its ``placement`` name (``engram.tables``) and built by
    :meth:`open`. ``row_format`` is how the rows are stored (:mod:`engram.row_formats`;
    ``e4m3-ue8m0`` unless given): ``ssd`` serves every format, ``hbm`` and ``dram``
    hold ``e4m3-ue8m0`` rows only.
    """

    # what the placement is (its traits: ``engram.placements``); ``placement`` is its name
    declaration: ClassVar[Placement]
    placement: ClassVar[str] = ""
    # NOTE: the TableOptions fields the placement takes besides the common ones
    # (``engram.tables.options.COMMON_OPTIONS``); any other field set is an error.
    options: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "declaration" in cls.__dict__:
            cls.placement = cls.declaration.name

    def __init__(
        self,
        num_rows: int,
        head_dim: int,
        device: torch.device,
        row_format: RowFormat | None = None,
    ):
        self.num_rows = num_rows
        self.head_dim = head_dim
        self.row_format = row_format or E4m3Ue8m0Rows(head_dim)
        self.device = torch.device(device)
        self.counters = TableCounters()
        # the served profile's count of the rows this table's lookups read (``open_table``
        # sets it from ``TableOptions.tally``); None: not counted
        self.tally: RowTally | None = None
        self._clock = LookupClock(self.device)

    @classmethod
    def open(
        cls, weight: torch.Tensor | None, scale: torch.Tensor | None, options: TableOptions
    ) -> EngramTable:
        """The placement's table of ``weight`` and ``scale`` (checked FP8 rows, or
        ``None`` for neither) built as ``options`` say."""
        raise NotImplementedError(f"{cls.__name__} is no registered placement")

    @property
    def row_bytes(self) -> int:
        return self.row_format.row_bytes

    def lookup(self, row_ids: torch.Tensor, owned: torch.Tensor | None = None) -> torch.Tensor:
        """The rows of ``row_ids``. ``owned``: for a TP shard that reads the ids of other
        shards as its row 0 (and zeroes those rows), which of ``row_ids`` are its own:
        only they count in the ``tally``."""
        mark = self._clock.start()
        ids = row_ids.reshape(-1)
        if not ids.is_cuda:
            self._check_ids(ids)
        flat, unique, tier_bytes = self._gather(ids)
        if self.tally is not None:
            self.tally.add(ids if owned is None else ids[owned.reshape(-1)])
        self.counters.record(ids.numel(), unique, tier_bytes, self._clock.stop(mark))
        return flat.view(*row_ids.shape, self.head_dim)

    @abstractmethod
    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, int, dict[str, int]]:
        """Rows of flat ``ids`` as bf16 [n, head_dim] on ``self.device``, plus the number
        of distinct rows read and the bytes read per tier."""

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The bf16 rows of sorted distinct int64 ``ids``, outside every count (a cache
        being filled, not a lookup)."""
        return self._gather(ids)[0]

    @abstractmethod
    def memory(self) -> dict[str, int]:
        """Bytes this table holds per tier (``hbm``, ``dram``, ``ssd``)."""

    def read_ahead(self, row_ids: torch.Tensor, *, urgent: bool = False) -> ReadAheadHandle | None:
        """Start reading ``row_ids``' rows ahead of their lookup (``urgent``: before the
        reads started without it); ``None`` where the lookups read nothing that reading
        ahead would hide (every placement but ssd)."""
        return None

    def stats(self) -> dict[str, float]:
        """A snapshot of the counts the placement keeps besides ``counters`` (none
        here; ssd: its RAM cache, read-ahead and I/O errors; the HBM hot cache: its hits)."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the table holds; the table is unusable afterwards."""

    def _check_ids(self, ids: torch.Tensor) -> None:
        if ids.dtype not in (torch.int32, torch.int64):
            raise EngramInputError(f"row ids must be int32 or int64, got {ids.dtype}")
        if ids.numel():
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= self.num_rows:
                bad = lo if lo < 0 else hi
                raise EngramInputError(
                    f"row id {bad} is out of range for a table of {self.num_rows:,} rows"
                )

    def __enter__(self) -> EngramTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def as_table_bytes(weight: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return as_uint8(weight), as_uint8(scale)


def required_rows(
    placement: str, weight: torch.Tensor | None, scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` and ``scale`` of a placement that holds the rows itself."""
    if weight is None or scale is None:
        raise EngramTableError(f"the {placement!r} placement needs the table's weight and scale")
    return weight, scale
