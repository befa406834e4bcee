"""What a checkpoint format tells the converter: which tensors are its tables, and how
to stream each table's rows."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from engram.ssd.safetensors_files import TensorEntry
from engram.ssd.sources import RowSource


class CheckpointFormat(ABC):
    """One naming of n-gram tables in safetensors checkpoints (one model family's)."""

    name: ClassVar[str]  # the registry key
    family: ClassVar[str]  # the model family, for the user
    pattern: ClassVar[str]  # how its table tensors are named, for error messages

    @abstractmethod
    def claims(self, tensor: str) -> bool:
        """Whether the tensor named ``tensor`` is part of a table of this format."""

    @abstractmethod
    def tables(
        self, checkpoint: Path, entries: dict[str, TensorEntry], config: dict[str, Any] | None
    ) -> dict[int, RowSource]:
        """Every table, by decoder layer, checked against ``config`` (``config.json``,
        ``None`` without one); raise :class:`~engram.errors.EngramTableError` naming
        what is wrong."""
