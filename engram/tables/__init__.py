"""Table placements behind one interface, chosen by name.

``PLACEMENTS`` feeds the CLI choices of the plugin (``--engram-offload``), so a new
placement registered here shows up there too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from engram.errors import EngramTableError
from engram.tables.base import EngramTable, TableCounters, check_table_arrays
from engram.tables.dram import DramTable
from engram.tables.hbm import HbmTable
from engram.tables.hot_cache import with_hot_cache
from engram.tables.off import OffTable
from engram.tables.ssd import create_ssd_table

TableFactory = Callable[..., EngramTable]

PLACEMENTS: dict[str, TableFactory] = {}
# NOTE: an HBM cache in front of an hbm table would only duplicate it.
HOT_CACHE_PLACEMENTS = ("dram", "ssd")


def register_placement(name: str, factory: TableFactory) -> None:
    PLACEMENTS[name] = factory


def placement_names() -> list[str]:
    return list(PLACEMENTS)


def create_table(
    placement: str,
    weight: torch.Tensor | None,
    scale: torch.Tensor | None,
    *,
    device: torch.device | str = "cpu",
    path: str | Path | None = None,
    head_dim: int | None = None,
    num_rows: int | None = None,
    hot_cache_bytes: int = 0,
    **options: object,
) -> EngramTable:
    """Build one layer's table in ``placement``.

    ``weight`` [rows, D] (uint8 or float8_e4m3fn) and ``scale`` [rows, D/32] (uint8 or
    float8_e8m0fnu) are the FP8 rows. ``off`` needs neither (give ``num_rows`` and
    ``head_dim``); ``ssd`` reads them from ``path`` when they are ``None``.
    """
    factory = PLACEMENTS.get(placement)
    if factory is None:
        raise EngramTableError(
            f"unknown Engram placement {placement!r}; choose one of {', '.join(PLACEMENTS)}"
        )
    device = torch.device(device)
    if placement == "off":
        rows = num_rows if num_rows is not None else (0 if weight is None else weight.shape[0])
        dim = head_dim if head_dim is not None else (0 if weight is None else weight.shape[1])
        return OffTable(rows, dim, device=device)
    if weight is not None or scale is not None:
        if weight is None or scale is None:
            raise EngramTableError("give both weight and scale, or neither")
        check_table_arrays(weight, scale, head_dim)
    table = factory(weight, scale, device=device, path=path, head_dim=head_dim, **options)
    if hot_cache_bytes and placement in HOT_CACHE_PLACEMENTS:
        table = with_hot_cache(table, hot_cache_bytes)
    return table


def _hbm(weight, scale, *, device, path=None, head_dim=None, **options):  # type: ignore[no-untyped-def]
    _need_rows("hbm", weight, options)
    return HbmTable(weight, scale, device=device)


def _dram(weight, scale, *, device, path=None, head_dim=None, **options):  # type: ignore[no-untyped-def]
    _need_rows("dram", weight, options)
    return DramTable(weight, scale, device=device)


def _need_rows(placement: str, weight: torch.Tensor | None, options: dict[str, object]) -> None:
    if options:
        raise EngramTableError(
            f"unknown option(s) for the {placement!r} placement: {sorted(options)}"
        )
    if weight is None:
        raise EngramTableError(f"the {placement!r} placement needs the table's weight and scale")


register_placement("hbm", _hbm)
register_placement("dram", _dram)
register_placement("ssd", create_ssd_table)
register_placement("off", OffTable)  # built directly in create_table

__all__ = [
    "PLACEMENTS",
    "EngramTable",
    "TableCounters",
    "create_table",
    "placement_names",
    "register_placement",
]
