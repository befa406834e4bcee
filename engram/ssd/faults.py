"""Errors of the SSD tier's reads.

A :class:`PageReadError` is what a reader raises when pages could not be read (the
errno of the failed call and the pages it covered). The table turns it into an
:class:`EngramIOError` for the one lookup that needed those rows; later lookups are
unaffected. Bytes that do not match their block hash are an
:class:`EngramChecksumError`, an I/O error of the same kind. A file that changed under
the table is not an I/O error but a permanent fault
(:class:`engram.ssd.integrity.FileGuard`).
"""

from __future__ import annotations

import os
from pathlib import Path

from engram.errors import EngramRunError, EngramTableError


class PageReadError(OSError):
    """Reading ``pages`` pages from page ``first_page`` of ``path`` failed."""

    def __init__(self, err: int, path: Path, first_page: int, pages: int, how: str):
        self.path, self.first_page, self.pages = path, first_page, pages
        last = first_page + pages - 1
        super().__init__(err, f"{os.strerror(err)} {how} pages {first_page:,}..{last:,} of {path}")


class EngramIOError(EngramTableError, EngramRunError):
    """An I/O error failed one lookup; the table stays usable."""

    # NOTE: a run-time failure (exit 1 from a command line), not bad input, although it
    # is also a table error for the callers that catch those.


class EngramChecksumError(EngramIOError):
    """Rows read from ``directory``'s data file do not match their block hash (chunk
    ``chunk``): that lookup fails, the rest of the table keeps serving."""

    def __init__(self, message: str, directory: Path, chunk: int):
        super().__init__(message)
        self.directory, self.chunk = directory, chunk
