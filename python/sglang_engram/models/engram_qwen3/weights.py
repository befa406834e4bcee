"""Where each checkpoint tensor of the tiny Engram model goes in the SGLang model.

A pure function of the name, so the mapping is tested without building the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Route kinds: an nn.Parameter of the SGLang model (by its name), or a tensor of a
# layer's Engram table (its "weight" or "scale": ``EngramBlock.load_table_tensor``; the
# tiny model holds the table in a core-library table, not in a parameter).
PARAM = "param"
TABLE_TENSOR = "table_tensor"

# (checkpoint name piece, fused SGLang parameter piece, shard id)
_STACKED = (
    ("q_proj", "qkv_proj", "q"),
    ("k_proj", "qkv_proj", "k"),
    ("v_proj", "qkv_proj", "v"),
    ("gate_proj", "gate_up_proj", 0),
    ("up_proj", "gate_up_proj", 1),
)
_TABLE = re.compile(r"^model\.layers\.(\d+)\.engram\.embed\.(weight|scale)$")
_ENGRAM = re.compile(r"^model\.layers\.(\d+)\.engram\.")


@dataclass(frozen=True)
class Route:
    kind: str  # PARAM or TABLE_TENSOR
    param: str  # parameter name, or "weight" / "scale" of the layer's table
    shard: str | int | None = None
    layer_id: int | None = None


def route_weight(name: str, *, engram_enabled: bool) -> Route | None:
    """The destination of checkpoint tensor ``name``; ``None`` means skip it."""
    engram = _ENGRAM.match(name)
    if engram:
        if not engram_enabled:
            return None
        table = _TABLE.match(name)
        if table:
            return Route(TABLE_TENSOR, table.group(2), layer_id=int(table.group(1)))
        return Route(PARAM, name, layer_id=int(engram.group(1)))
    if "rotary_emb.inv_freq" in name:
        return None
    for piece, fused, shard in _STACKED:
        if f".{piece}." in name:
            return Route(PARAM, name.replace(f".{piece}.", f".{fused}."), shard)
    return Route(PARAM, name)
