"""Build one Engram layer's table in the configured placement (core library tables).

``hbm`` and ``dram`` tables are built from the rows the model loader read;
``ssd`` tables are converted straight from the checkpoint files (first start) or
reopened (later starts), so their rows never pass through host memory whole.
"""

from __future__ import annotations

import logging

import torch

from engram.ssd.directory import table_dir
from engram.tables import EngramTable, create_table
from engram.tables.ssd import DEFAULT_PREFETCH_BYTES as PREFETCH_BYTES
from sglang_engram.args.model_facts import model_facts
from sglang_engram.args.server_config import EngramServerConfig
from sglang_engram.tables import served as table_registry
from sglang_engram.tables import ssd_dirs as ssd_tables

logger = logging.getLogger(__name__)


def table_options(config: EngramServerConfig, tables: int) -> dict[str, object]:
    """Table options of the placement for one of the ``tables`` Engram tables this
    process serves: its share of the HBM hot cache (dram/ssd) and, for ssd, of the RAM
    cache and the prefetch budget. The flags size them per process (per GPU)."""
    options: dict[str, object] = {}
    if config.offload in ("dram", "ssd"):
        options["hot_cache_bytes"] = config.hot_cache_bytes // tables
    if config.offload == "ssd":
        options["ram_cache_bytes"] = config.ram_cache_bytes // tables
        options["prefetch_bytes"] = PREFETCH_BYTES // tables
        if config.ssd_read:
            options["read"] = config.ssd_read
    return options


def engram_table_count(model_path: str) -> int:
    """How many Engram layers the served checkpoint has (its config.json); the
    DeepSeek-V4.1-Flash count when the path is a hub id (nothing local to read)."""
    return model_facts(model_path).engram_table_count


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
    tables: int,
    shard: str = "",
) -> EngramTable:
    """Layer ``layer_id``'s rows ``rows`` as an ssd table, converting on first start
    (``tables``: how many Engram tables this process serves; they share the caches)."""
    assert config.ssd_dir is not None, "validated at startup: ssd needs --engram-ssd-dir"
    source = ssd_tables.checkpoint_source(model_path, layer_id, rows)
    path = ssd_tables.ensure_converted(table_dir(config.ssd_dir, layer_id, shard), source)
    table = create_table(
        "ssd",
        None,
        None,
        device=device,
        path=path,
        head_dim=head_dim,
        num_rows=rows[1] - rows[0],
        **table_options(config, tables),
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
    tables: int,
    row_start: int = 0,
) -> EngramTable:
    """Layer ``layer_id``'s hbm or dram table from its loaded FP8 rows, the layer's
    rows from ``row_start`` on (``tables``: how many Engram tables this process serves;
    they share the hot cache)."""
    assert config.offload in ("hbm", "dram"), config.offload
    table = create_table(
        config.offload,
        weight,
        scale,
        device=device,
        head_dim=head_dim,
        num_rows=weight.shape[0],
        **table_options(config, tables),
    )
    table_registry.add(layer_id, table, row_start=row_start)
    return table
