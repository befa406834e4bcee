"""Put a finished table directory in place of the one it replaces.

A table is several files (rows, block hashes, manifest), so it is published by
renaming its directory. Over an existing table the two directories are swapped in one
``renameat2(RENAME_EXCHANGE)`` (Linux 3.15+, on ext4, xfs, btrfs, tmpfs, ...): the table
path always holds a whole table, the old or the new, and the old one, now in the work
directory, is removed after. Where the exchange is not available the old table is first
renamed aside (``<table>.replaced``); a crash between the two renames leaves no table
at the path but the finished work directory, which the next conversion publishes at
once, and the table aside, removed then.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from pathlib import Path

from engram.files import fsync_dir
from engram.ssd.manifest import MANIFEST

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
REPLACED_SUFFIX = ".replaced"


def publish(work: Path, final: Path) -> None:
    """Make the finished ``work`` directory the table at ``final``."""
    if final.exists() and not any(final.iterdir()):
        final.rmdir()  # an empty placeholder directory
    if not final.exists():
        os.rename(work, final)
        fsync_dir(final.parent)
        return
    if _exchange(work, final):
        fsync_dir(final.parent)
        discard(work)  # the old table
        return
    aside = final.with_name(final.name + REPLACED_SUFFIX)
    discard(aside)
    os.rename(final, aside)
    os.rename(work, final)
    fsync_dir(final.parent)
    discard(aside)


def discard(directory: Path) -> None:
    """Remove a work or replaced table directory, its manifest first: a crash half
    way leaves a directory that is no finished table (it is written again, never used)."""
    if directory.exists():
        (directory / MANIFEST).unlink(missing_ok=True)
        shutil.rmtree(directory)


def _exchange(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` atomically; False where the system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False  # no glibc 2.28+ (or not Linux)
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # this filesystem (or kernel) has no exchange
    raise OSError(err, f"swapping {a} and {b}: {os.strerror(err)}")
