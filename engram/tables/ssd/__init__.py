"""``ssd``: rows in files on local NVMe, read on demand (format: :mod:`engram.ssd.layout`).

The table (:mod:`.table`, :class:`SsdTable`) is made of parts, each on its own:

- :mod:`.table_file`: the data file read through the table's read strategy, every block
  checked the first time it is read; a failed read fails one lookup, a failed check also
  marks the table damaged (the next start converts it again);
- :mod:`.ram_front`: the RAM row cache in front of the file, and each thread's scratch;
- :mod:`.read_ahead_fill`: how the read-ahead thread fills a handle
  (:mod:`engram.rows.read_ahead`), a prompt's rows in slices while decode steps read ahead;
- :mod:`.seeding`: with a ``seed`` (rows ranked by a frequency profile), a background
  thread fills the RAM cache with the hottest rows that fit it while the table serves;
- :mod:`.stats`: the counters ``stats()`` gives ``/metrics``.
"""

from engram.tables.ssd.read_ahead_fill import AHEAD_READ_ROWS
from engram.tables.ssd.table import SsdTable

__all__ = ["AHEAD_READ_ROWS", "SsdTable"]
