"""What the plugin reads of the served checkpoint's ``config.json``, read once per process.

The launcher's flag hook, its start-up checks and CUDA-graph policy, the ``sglang serve``
detector and every DeepSeek-V4.1 layer of a scheduler ask for the same facts; the first
ask reads the file and the runtime holds the answer
(:meth:`~sglang_engram.protocol.runtime.EngramRuntime.model_facts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram.model_config import has_model_config, read_model_config
from sglang_engram.protocol.family import ModelFamily
from sglang_engram.protocol.registry import family_of


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


def read_model_facts(path: str | None) -> ModelFacts:
    """The facts of the checkpoint at ``path`` (resolved; ``None``: no model path),
    read from its ``config.json`` (none there: ``hf_config`` is ``None``).

    Raises :class:`~engram.errors.EngramConfigError` naming the file for a
    ``config.json`` that cannot be read (:func:`engram.model_config.read_model_config`)."""
    if not path or not has_model_config(path):
        return ModelFacts(path, None)
    return ModelFacts(path, read_model_config(path))
