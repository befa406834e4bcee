"""Path options of the command lines, checked by argparse before any work: a file to
read must exist; a file or directory to write must be creatable by this user. Nothing is
created here, so a command that fails later leaves nothing behind."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def existing_file(text: str) -> Path:
    """An argparse ``type``: a file that exists (an input)."""
    path = Path(text)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text} {what}")
    return path


def directory(text: str) -> Path:
    """An argparse ``type``: a directory to write into, existing or to be created. Refused
    when it is a file, lies below one, or this user cannot write where it is (or would be);
    nothing is created here, so a command that fails later leaves nothing behind."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file; give a directory")
    _check_writable(text, path)
    return path


def output_file(text: str) -> Path:
    """An argparse ``type``: a file to write, refused as :func:`directory` refuses a folder."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name")
    _check_writable(text, path.parent)
    return path


def _check_writable(text: str, folder: Path) -> None:
    from engram.files import nearest_existing

    base = nearest_existing(folder)
    if not base.is_dir():
        raise argparse.ArgumentTypeError(f"{text} cannot be created: {base} is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"{text} cannot be written: {base} is not writable by this user"
        )
