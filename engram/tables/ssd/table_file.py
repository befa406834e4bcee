"""An ssd table's data file, as its lookups and its read-ahead read it.

Rows are read with the table's read strategy (:mod:`engram.ssd.readers`), every block
checked against its hash the first time it is read from the disk
(:mod:`engram.ssd.block_hashes`). A failure fails that one read: an I/O error as
:class:`EngramIOError`; a block that fails its check as :class:`EngramChecksumError`,
which also marks the table damaged once (the next start converts it again). A data file
that changes under the table is a permanent fault: every later read raises.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engram.ssd.block_hashes import BlockChecks
from engram.ssd.faults import EngramChecksumError, EngramIOError
from engram.ssd.integrity import FileGuard, mark_damaged
from engram.ssd.manifest import TableManifest
from engram.ssd.readers import ALL_ROWS, open_reader


class TableFile:
    """The data file of the table ``manifest`` describes in ``directory``, read by the
    strategy named ``read`` (blocks checked against ``checks``; ``None``: unchecked)."""

    def __init__(
        self, directory: Path, manifest: TableManifest, read: str, checks: BlockChecks | None
    ):
        self.directory = directory
        layout = manifest.layout
        self.reader = open_reader(read, directory / manifest.data_file, layout, checks)
        self._guard = FileGuard(self.reader.path, self.reader.fd, layout.file_bytes)
        self._marked_damaged = False

    def check(self) -> None:
        """Raise if the data file changed under the table."""
        self._guard.check()

    def read(self, ids: np.ndarray, out: np.ndarray, at: np.ndarray = ALL_ROWS) -> None:
        """The rows of sorted distinct ``ids`` from the file into ``out`` (``at`` as the
        reader takes it), a failure said as :class:`EngramIOError` (a block that fails
        its check marks the table damaged)."""
        try:
            self.reader.read_rows(ids, out, at)
        except EngramChecksumError as err:
            self._guard.check()  # a file that changed is a permanent fault, said as such
            if not self._marked_damaged:
                self._marked_damaged = True
                mark_damaged(self.directory, err)
            raise EngramChecksumError(
                f"{err}. This lookup failed; the table is marked to be converted again at "
                "the next start, its other blocks keep serving",
                err.directory,
                err.chunk,
            ) from err
        except OSError as err:
            self._guard.check()  # a file that changed is a permanent fault, said as such
            raise EngramIOError(
                f"I/O error reading {ids.size:,} rows of SSD table {self.directory}: {err}. "
                "Only this lookup failed; the table keeps serving"
            ) from err

    def close(self) -> None:
        self.reader.close()
