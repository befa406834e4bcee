"""Open one layer's table in the configured placement: the one way every family does.

``hbm`` and ``dram`` tables are built from the rows the model loader read; ``ssd``
tables are converted straight from the checkpoint files (first start) or reopened
(later starts), so their rows never pass through host memory whole. The cache flags
size budgets per process (per GPU), shared by every Engram table it serves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engram.profile.identity import HashIdentity
from engram.profile.tally import RowTally
from engram.rows.read_ahead import DEFAULT_READ_AHEAD_BYTES
from engram.rows.seed_rows import SeedRows
from engram.ssd.directory import table_dir
from engram.ssd.readers import DEFAULT_READER
from engram.tables import EngramTable, TableOptions, open_table
from sglang_engram.protocol.family import ModelFamily
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.protocol.server_config import EngramServerConfig
from sglang_engram.tables import served
from sglang_engram.tables.profile_out import upkeep_for
from sglang_engram.tables.ssd_dirs import checkpoint_source


def open_layer_table(
    runtime: EngramRuntime,
    config: EngramServerConfig,
    family: ModelFamily,
    layer_id: int,
    *,
    rows: tuple[int, int],
    head_dim: int,
    device: torch.device,
    weight: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    shard: str = "",
) -> EngramTable:
    """Rows ``rows`` of layer ``layer_id``'s table (all of them, or a TP shard's, whose
    directory suffix is ``shard``) in ``config.offload``, registered as served: from
    the loaded ``weight`` and ``scale`` (hbm, dram) or from the checkpoint (ssd), in
    ``config``'s placement; registered in ``runtime``'s served tables."""
    model_path = serving_model_path()
    options = layer_table_options(
        runtime, config, family, layer_id, rows=rows, head_dim=head_dim, device=device, shard=shard,
        model_path=model_path,
    )  # fmt: skip
    table = open_table(options, weight, scale)
    served.add(runtime.tables, layer_id, table, row_start=rows[0])
    return table


def layer_table_options(
    runtime: EngramRuntime,
    config: EngramServerConfig,
    family: ModelFamily,
    layer_id: int,
    *,
    rows: tuple[int, int],
    head_dim: int,
    device: torch.device,
    shard: str,
    model_path: str,
) -> TableOptions:
    """The :class:`TableOptions` of :func:`open_layer_table`: this table's share of the
    HBM hot cache and, for ssd, of the RAM cache and the read-ahead budget, and the
    rows of ``--engram-seed-profile`` to seed its RAM cache with and the tally of
    ``--engram-profile-out``."""
    # NOTE: the family's own count when there is no local config.json (a hub id).
    tables = len(family.table_layers(runtime.model_facts(model_path).hf_config))
    num_rows, hot_cache_bytes = rows[1] - rows[0], config.hot_cache_bytes // tables
    placement, options = config.placement, {}
    if placement.files:
        assert config.ssd_dir is not None, "option_rules.check: the placement needs a directory"
        options["path"] = table_dir(config.ssd_dir, layer_id, shard)
        options["source"] = checkpoint_source(runtime.tables, family, model_path, layer_id, rows)
        options["read"] = config.ssd_read or DEFAULT_READER
    if placement.ram_cache:
        options["ram_cache_bytes"] = config.ram_cache_bytes // tables
    if placement.read_ahead:
        options["read_ahead_bytes"] = DEFAULT_READ_AHEAD_BYTES // tables
    if placement.seeds:
        options["seed"] = seed_rows(config.seed_profile, layer_id, rows, shard)
        options["tally"] = served_tally(
            runtime, config.profile_out, layer_id, rows, shard, model_path
        )
    return TableOptions(
        config.offload, device=device, head_dim=head_dim, num_rows=num_rows,
        hot_cache_bytes=hot_cache_bytes, **options,
    )  # fmt: skip


def seed_rows(
    profile: str | None, layer_id: int, rows: tuple[int, int], shard: str
) -> SeedRows | None:
    """The profile's ranked rows of layer ``layer_id`` that this table holds (rows
    ``rows`` of the layer), as its own row ids; ``None`` without a profile. The profile
    was checked against the served model at start-up (``startup_checks``)."""
    if profile is None:
        return None
    from engram.profile import layer_rows

    ranked = layer_rows(profile, layer_id)
    mine = ranked[(ranked >= rows[0]) & (ranked < rows[1])] - np.int64(rows[0])
    return SeedRows(mine, f"Engram layer {layer_id}{shard} (profile {profile})")


def served_tally(
    runtime: EngramRuntime,
    profile_out: str | None,
    layer_id: int,
    rows: tuple[int, int],
    shard: str,
    model_path: str,
) -> RowTally | None:
    """This table's count of the rows its lookups read, written with the process's other
    tables to ``--engram-profile-out`` (a TP rank's file with its shard's suffix, a DP
    rank's with ``.dp{rank}``: ``engram.profile.upkeep.rank_path``); ``None`` without it."""
    if profile_out is None:
        return None
    from sglang.srt.runtime_context import get_parallel, get_serving

    from engram.profile import profile_hash, rank_path

    dp_rank = get_parallel().dp_rank
    suffix = shard + ("" if dp_rank is None else f".dp{dp_rank}")
    tokenizer = get_serving().tokenizer_path or model_path

    def identity() -> HashIdentity:
        hf_config = runtime.model_facts(model_path).hf_config
        assert hf_config is not None, "validated at startup: ssd needs a local config.json"
        return profile_hash(Path(model_path), hf_config, tokenizer)[1]

    upkeep = upkeep_for(runtime, rank_path(profile_out, suffix), identity)
    return upkeep.tally(layer_id, rows[0], rows[1] - rows[0])


def serving_model_path() -> str:
    """The checkpoint directory SGLang loads (the ssd tables are converted from it)."""
    from sglang.srt.runtime_context import get_model

    return str(get_model().model_path)
