"""Where each checkpoint tensor of the tiny Engram model goes in the SGLang model.

A pure function of the name, so the mapping is tested without building the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PARAM = "param"
ENGRAM_PARAM = "engram_table"

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
    kind: str  # PARAM: an nn.Parameter; ENGRAM_PARAM: a table's weight or scale
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
            return Route(ENGRAM_PARAM, table.group(2), layer_id=int(table.group(1)))
        return Route(PARAM, name, layer_id=int(engram.group(1)))
    if "rotary_emb.inv_freq" in name:
        return None
    for piece, fused, shard in _STACKED:
        if f".{piece}." in name:
            return Route(PARAM, name.replace(f".{piece}.", f".{fused}."), shard)
    return Route(PARAM, name)
