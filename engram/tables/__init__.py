"""Table placements behind one interface, chosen by name.

Each placement is an :class:`EngramTable` subclass registered here under its name
(``off`` included) with its declaration (:mod:`engram.placements`, its traits), which
feeds the plugin's ``--engram-offload`` choices, its option checks and the specs' allowed
placements, so a placement registered here shows up there too. A
table is built from its rows and one :class:`TableOptions` (:func:`open_table`), or
from keywords (:func:`create_table`).
"""

from __future__ import annotations

from typing import Any

import torch

from engram.errors import EngramTableError
from engram.placements import declare, placement_names
from engram.tables.base import EngramTable, TableCounters, check_table_arrays
from engram.tables.dram import DramTable
from engram.tables.hbm import HbmTable
from engram.tables.hot_cache import with_hot_cache
from engram.tables.off import OffTable
from engram.tables.options import OPTION_NAMES, PLACEMENTS, TableOptions
from engram.tables.ssd import SsdTable


def register_placement(table_class: type[EngramTable]) -> None:
    """Register ``table_class`` and its declaration (``engram.placements``) by its name."""
    declare(table_class.declaration)
    PLACEMENTS[table_class.placement] = table_class


def open_table(
    options: TableOptions, weight: torch.Tensor | None = None, scale: torch.Tensor | None = None
) -> EngramTable:
    """One layer's table in ``options.placement``, behind the HBM hot cache it asks for.

    ``weight`` [rows, D] (uint8 or float8_e4m3fn) and ``scale`` [rows, D/32] (uint8 or
    float8_e8m0fnu) are the FP8 rows. ``off`` needs neither (give ``num_rows`` and
    ``head_dim``); ``ssd`` reads them from ``path`` when they are ``None``.
    """
    if (weight is None) != (scale is None):
        raise EngramTableError("give both weight and scale, or neither")
    if weight is not None and scale is not None:
        check_table_arrays(weight, scale, options.head_dim, options.num_rows)
    table = with_hot_cache(
        options.table_class.open(weight, scale, options), options.hot_cache_capacity, options.seed
    )
    table.tally = options.tally  # NOTE: the outer table's lookups: the hot cache's hits too
    return table


def create_table(
    placement: str,
    weight: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    **options: Any,
) -> EngramTable:
    """:func:`open_table` with the :class:`TableOptions` fields as keywords."""
    fields = {name: value for name, value in options.items() if name in OPTION_NAMES}
    unknown = frozenset(options) - OPTION_NAMES
    return open_table(TableOptions(placement, **fields, unknown=unknown), weight, scale)


register_placement(HbmTable)
register_placement(DramTable)
register_placement(SsdTable)
register_placement(OffTable)

__all__ = [
    "PLACEMENTS",
    "EngramTable",
    "TableCounters",
    "TableOptions",
    "create_table",
    "open_table",
    "placement_names",
    "register_placement",
]
