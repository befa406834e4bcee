"""Build one Engram layer's table in the configured placement (core library tables).

``hbm`` and ``dram`` tables are built from the rows the model loader read;
``ssd`` tables are converted straight from the checkpoint files (first start) or
reopened (later starts), so their rows never pass through host memory whole.
"""

from __future__ import annotations

import logging

import torch

from engram.tables import EngramTable, create_table
from sglang_engram import ssd_tables, table_registry
from sglang_engram.config import EngramServerConfig

logger = logging.getLogger(__name__)


def table_options(config: EngramServerConfig) -> dict[str, object]:
    """Table options of the placement: the HBM hot cache in front of dram/ssd, and the
    ssd tier's RAM cache."""
    options: dict[str, object] = {}
    if config.offload in ("dram", "ssd"):
        options["hot_cache_bytes"] = config.hot_cache_bytes
    if config.offload == "ssd":
        options["ram_cache_bytes"] = config.ram_cache_bytes
    return options


def serving_model_path() -> str:
    """The checkpoint directory SGLang loads (the ssd tables are converted from it)."""
    from sglang.srt.runtime_context import get_model

    return str(get_model().model_path)


def ssd_table(
    config: EngramServerConfig,
    layer_id: int,
    *,
    model_path: str,
    rows: tuple[int, int],
    head_dim: int,
    device: torch.device,
    shard: str = "",
) -> EngramTable:
    """Layer ``layer_id``'s rows ``rows`` as an ssd table, converting on first start."""
    assert config.ssd_dir is not None, "validated at startup: ssd needs --engram-ssd-dir"
    source = ssd_tables.checkpoint_source(model_path, layer_id, rows)
    path = ssd_tables.ensure_converted(
        ssd_tables.table_dir(config.ssd_dir, layer_id, shard), source
    )
    table = create_table(
        "ssd",
        None,
        None,
        device=device,
        path=path,
        head_dim=head_dim,
        num_rows=rows[1] - rows[0],
        **table_options(config),
    )
    table_registry.add(layer_id, table, row_start=rows[0])
    return table


def build_table(
    config: EngramServerConfig,
    layer_id: int,
    weight: torch.Tensor,
    scale: torch.Tensor,
    *,
    head_dim: int,
    device: torch.device,
) -> EngramTable:
    """Layer ``layer_id``'s hbm or dram table from its loaded FP8 rows."""
    assert config.offload in ("hbm", "dram"), config.offload
    table = create_table(
        config.offload,
        weight,
        scale,
        device=device,
        head_dim=head_dim,
        num_rows=weight.shape[0],
        **table_options(config),
    )
    table_registry.add(layer_id, table)
    return table
