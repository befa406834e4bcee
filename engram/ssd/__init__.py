"""The SSD tier: Engram tables in files on local NVMe instead of host DRAM.

- :mod:`~engram.ssd.layout`, :mod:`~engram.ssd.manifest`,
  :mod:`~engram.ssd.block_hashes`: the file format (rows of any
  :mod:`engram.row_formats` format, e.g. 264-byte DSv4.1 rows, 15 to a 4 KiB page, none
  straddling a page; an xxh3 hash per block, checked the first time the block is
  read from disk; a manifest with shapes, dtypes, crc32 per chunk and the source's
  identity); :mod:`~engram.ssd.directory`: ``layer{L}`` under an SSD directory.
- :mod:`~engram.ssd.ensure`: the one "reuse or convert" decision for a table directory
  (:func:`~engram.ssd.ensure.decide`) and acting on it.
- :mod:`~engram.ssd.writer`, :mod:`~engram.ssd.converter`, :mod:`~engram.ssd.checkpoint`,
  :mod:`~engram.ssd.publish`: writing tables (resumable, checksummed, swapped in beside
  the old table once complete) from rows read in slices of a safetensors checkpoint
  (each family's naming in :mod:`~engram.ssd.checkpoint_formats`);
  ``python -m engram.convert`` is the command line.
- :mod:`~engram.ssd.readers`: read strategies (``mmap``, ``pread``, ``direct``; their
  names declared torch-free in :mod:`~engram.ssd.read_strategies`), chosen by name; each
  plans its reads into reused arrays (:mod:`~engram.ssd.readers.planning`).
- :mod:`~engram.ssd.row_cache`, :mod:`~engram.ssd.bounce_buffers`: the RAM hot-row
  cache, the (pinned) host buffers rows pass through on their way to the device.
- :mod:`~engram.ssd.kernels`: the read path's compiled loops (numba, no GIL): block
  hashes (our XXH3), read plans and row gathers, the RAM cache's probe and admit, the
  read-ahead handles' filters (:mod:`engram.rows.read_ahead`).
- :mod:`~engram.ssd.integrity`, :mod:`~engram.ssd.faults`: checks on open, the damage
  mark, a file changing under a running table, I/O and checksum errors that fail one
  lookup.

The table itself is :class:`engram.tables.ssd.SsdTable` (placement ``ssd``), made of
parts in :mod:`engram.tables.ssd`; what every placement's tables use besides (the HBM
hot cache's index, seed rows, read-ahead handles) is :mod:`engram.rows`.

Choosing the read strategy (``python benchmark/bench_lookup.py --compare-readers``,
4 GiB table, 2-core VM with a virtio disk, rows/s, median of runs)::

                      decode warm   decode cold   prefill warm   prefill cold
    mmap                  688,605        84,507      6,018,972        157,612
    pread                  95,579        43,580        133,381         59,256
    naive (np.memmap)     950,624           678      2,287,928         85,558
    dram (in RAM)       1,471,084             -      3,697,964              -

``mmap`` wins everywhere that matters: page-cache hits cost one gather (no system call
per page) and cold pages are read with one deep queue of ``MADV_WILLNEED`` requests,
where ``pread`` pays a system call and a 4 KiB copy per page and only as much queue depth
as it has threads (the disk serves ~110 k random 4 KiB reads/s at depth, ~20 k at depth
one). Decode-sized warm figures swing with the machine's load (0.7 ms per 3,072-row
lookup measured alone). io_uring: the maintained binding on the package registry
(``liburing`` 2026.3.30, a Zig-built wheel) dies with SIGILL on this CPU when creating a
ring, and ``pyuring`` 0.3.3 ships only source that needs the system's liburing headers
and a C compiler; neither installs and works from the registry alone, so there is no
io_uring strategy.
"""
