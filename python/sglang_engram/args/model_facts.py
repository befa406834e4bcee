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

from sglang_engram.models.family import ModelFamily
from sglang_engram.models.registry import family_of
from sglang_engram.runtime import get_runtime


@dataclass(frozen=True)
class ModelFacts:
    """The served checkpoint's ``config.json`` (``hf_config``; ``None`` when there is no
    local one: a hub id, or no ``--model-path``)."""

    # the model path the facts are of (resolved), or None without one
    path: str | None
    hf_config: dict[str, Any] | None

    @property
    def family(self) -> ModelFamily | None:
        """The model family of the checkpoint (``None``: no n-gram tables, or no local
        config to read)."""
        return family_of(self.hf_config)

    @property
    def serves_tables(self) -> bool:
        """Whether the plugin places this checkpoint's n-gram tables (a family it serves)."""
        return self.family is not None and self.family.served


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
