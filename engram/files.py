"""Atomic file writes: a reader sees the old file or the whole new one, never half.

The one helper every writer of small state files uses (token-map cache, SSD
manifests, cluster state): a unique temporary name in the target's folder (so
concurrent writers never share one), fsync, ``os.replace``, then fsync of the folder.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

GIB = 1 << 30
MIB = 1 << 20


def atomic_write(path: str | os.PathLike[str], data: bytes | str | Callable[[IO[bytes]], None]) -> None:
    """Write ``data`` (bytes, text as UTF-8, or a function that writes to the open
    binary file) to ``path`` atomically. The temporary file is removed on any error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
