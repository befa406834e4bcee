"""What the plugin reads of the served checkpoint's ``config.json``, read once per process.

The launcher's flag hook, its start-up checks and CUDA-graph policy, the ``sglang serve``
detector and every DeepSeek-V4.1 layer of a scheduler ask for the same facts; the first
ask reads the file and the runtime holds the answer (:func:`model_facts`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.presets import DSV41_FLASH
from engram.spec import has_engram
from sglang_engram.runtime import get_runtime


@dataclass(frozen=True)
class ModelFacts:
    """The served checkpoint's ``config.json`` (``hf_config``; ``None`` when there is no
    local one: a hub id, or no ``--model-path``)."""

    # the model path the facts are of (resolved), or None without one
    path: str | None
    hf_config: dict[str, Any] | None

    @property
    def has_engram(self) -> bool:
        return self.hf_config is not None and has_engram(self.hf_config)

    @property
    def is_tiny(self) -> bool:
        """The tiny Engram model (every TP rank holds whole tables) rather than
        DeepSeek-V4.1 (each rank holds a shard)."""
        from sglang_engram.models import ARCHITECTURES

        return bool(set((self.hf_config or {}).get("architectures") or ()) & set(ARCHITECTURES))

    @property
    def engram_table_count(self) -> int:
        """How many Engram layers the checkpoint has; the DeepSeek-V4.1-Flash count when
        there is nothing local to read."""
        return len(
            (self.hf_config or {}).get("engram_layer_ids") or DSV41_FLASH["engram_layer_ids"]
        )


def model_facts(model_path: str | None) -> ModelFacts:
    """The facts of ``model_path``, read from its ``config.json`` on the first call and
    held by the runtime; a call for another path reads that one instead.

    Raises ``OSError`` or ``ValueError`` (JSON that is not an object) for a
    ``config.json`` that cannot be read."""
    key = os.path.realpath(model_path) if model_path else None
    runtime = get_runtime()
    with runtime.lock:
        held = runtime.model
        if held is not None and held.path == key:
            return held
        hf_config = None
        path = Path(key) / "config.json" if key else None
        if path is not None and path.is_file():
            runtime.config_json_reads += 1
            hf_config = json.loads(path.read_text())
            if not isinstance(hf_config, dict):
                raise ValueError(f"{path} holds no JSON object")
        runtime.model = ModelFacts(key, hf_config)
        return runtime.model
