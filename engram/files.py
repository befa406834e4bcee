"""Atomic file writes: a reader sees the old file or the whole new one, never half.

The one helper every writer of small state files uses (token-map cache, SSD
manifests, cluster state, reports): a unique temporary name in the target's folder (so
concurrent writers never share one), fsync, ``os.replace``, then fsync of the folder.
The new file gets the mode ``open()`` would give it: the mode of the file it replaces,
or 0666 less the umask.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO

GIB = 1 << 30
MIB = 1 << 20


def atomic_write(
    path: str | os.PathLike[str], data: bytes | str | Callable[[IO[bytes]], None]
) -> None:
    """Write ``data`` (bytes, text as UTF-8, or a function that writes to the open
    binary file) to ``path`` atomically. The temporary file is removed on any error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(path)
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


def _create_temporary(path: Path) -> tuple[int, Path]:
    """A new, uniquely named file beside ``path``, open for writing.

    NOTE: not ``tempfile.mkstemp``, which creates 0600 files: users could not read the
    reports and manifests written through here. ``os.open`` with 0666 applies the umask.
    """
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        mode = None
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        if mode is not None:
            os.fchmod(fd, mode)
        return fd, tmp


def nearest_existing(path: str | os.PathLike[str]) -> Path:
    """``path`` itself if it exists, else its closest existing ancestor (what creating it
    would write into)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
