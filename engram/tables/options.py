"""How one layer's table is built besides its rows: one frozen record, checked once.

Every field but ``placement`` has a default; a field set to anything else must be one
the placement takes (its class's ``options``), so a flag meant for another placement
(``ram_cache_bytes`` for ``dram``) is an error instead of being ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

import torch

from engram.errors import EngramTableError
from engram.placements import Placement
from engram.rows.read_ahead import DEFAULT_READ_AHEAD_BYTES
from engram.rows.seed_rows import SeedRows
from engram.ssd.layout import DEFAULT_CHUNK_BYTES
from engram.ssd.readers import DEFAULT_READER
from engram.ssd.sources import RowSource

if TYPE_CHECKING:
    from engram.profile.tally import RowTally


class PlacementClass(Protocol):
    """What the options read of a placement's table class (an
    ``engram.tables.base.EngramTable`` subclass, whose ``open`` takes these options)."""

    declaration: ClassVar[Placement]
    placement: ClassVar[str]
    options: ClassVar[frozenset[str]]


# NOTE: name -> table class, in registration order (the order of the CLI choices);
# filled by engram.tables, read here to check the options against the placement.
PLACEMENTS: dict[str, type[PlacementClass]] = {}

# NOTE: the fields every placement takes; ``hot_cache_bytes`` too, since the flag is
# per server: only a placement whose class says ``hot_cache`` gets the cache.
COMMON_OPTIONS = frozenset(
    {"placement", "device", "head_dim", "num_rows", "hot_cache_bytes", "tally"}
)


@dataclass(frozen=True)
class TableOptions:
    """Where a table lives and how it is built.

    ``head_dim`` and ``num_rows`` are the spec's: checked against the rows (an ``off``
    table takes its size from them). ``hot_cache_bytes`` puts an HBM cache of hot rows
    in front of a ``dram`` or ``ssd`` table (an ``hbm`` table's rows are in HBM
    already; ``off`` has none), filled at open with the hottest rows of ``seed`` that
    fit (rows ranked by a frequency profile). The rest are the ``ssd`` placement's: the
    table directory ``path`` (or a converted checkpoint and its ``layer``), the rows to
    convert there when its table does not hold them (``source``: a row source streaming
    them, or the weight and scale given to the table), the read strategy, the RAM row
    cache and read-ahead budgets, the open check (``verify``) and the chunk size of a
    conversion; ``seed`` seeds its RAM cache too, in the background. Any placement
    counts the rows its lookups read into a ``tally`` (the served profile) when given one.
    """

    placement: str
    device: torch.device | str = "cpu"
    head_dim: int | None = None
    num_rows: int | None = None
    hot_cache_bytes: int = 0
    path: Path | str | None = None
    layer: int | None = None
    source: RowSource | None = field(default=None, compare=False, repr=False)
    read: str = DEFAULT_READER
    ram_cache_bytes: int = 0
    read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES
    verify: str = "quick"
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    seed: SeedRows | None = field(default=None, compare=False, repr=False)
    tally: RowTally | None = field(default=None, compare=False, repr=False)
    # NOTE: names given that are no field at all (``engram.tables.create_table``'s
    # keywords), reported with the fields the placement does not take: one error.
    unknown: InitVar[frozenset[str]] = frozenset()

    def __post_init__(self, unknown: frozenset[str]) -> None:
        table_class = PLACEMENTS.get(self.placement)
        if table_class is None:
            raise EngramTableError(
                f"unknown Engram placement {self.placement!r}; "
                f"choose one of {', '.join(PLACEMENTS)}"
            )
        wrong = unknown | (_given(self) - COMMON_OPTIONS - table_class.options)
        if wrong:
            raise EngramTableError(
                f"unknown option(s) for the {self.placement!r} placement: {sorted(wrong)}"
            )

    @property
    def table_class(self) -> type[PlacementClass]:
        return PLACEMENTS[self.placement]

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def table_path(self) -> Path | None:
        return None if self.path is None else Path(self.path)

    @property
    def hot_cache_capacity(self) -> int:
        """Bytes of the HBM hot cache in front of the table (0: none)."""
        return self.hot_cache_bytes if self.table_class.declaration.hot_cache else 0


OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(TableOptions)) - {"placement"}


def _given(options: TableOptions) -> set[str]:
    """The fields of ``options`` set to something other than their default."""
    return {
        f.name
        for f in dataclasses.fields(options)
        if f.default is not dataclasses.MISSING and getattr(options, f.name) != f.default
    }
