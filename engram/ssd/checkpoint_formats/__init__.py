"""The checkpoint formats the converter reads, by name: each one model family's naming of
its n-gram tables in safetensors checkpoints (:class:`CheckpointFormat`). A format
registered here is found by :func:`engram.ssd.checkpoint.find_checkpoint_tables`."""

from __future__ import annotations

from engram.ssd.checkpoint_formats.base import CheckpointFormat
from engram.ssd.checkpoint_formats.engram_embed import EngramEmbedFormat
from engram.ssd.checkpoint_formats.ple_shards import PleShardsFormat

# NOTE: name -> format, in registration order.
CHECKPOINT_FORMATS: dict[str, CheckpointFormat] = {}


def register_checkpoint_format(checkpoint_format: CheckpointFormat) -> None:
    CHECKPOINT_FORMATS[checkpoint_format.name] = checkpoint_format


register_checkpoint_format(EngramEmbedFormat())
register_checkpoint_format(PleShardsFormat())

__all__ = ["CHECKPOINT_FORMATS", "CheckpointFormat", "register_checkpoint_format"]
