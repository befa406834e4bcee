"""The SSD read strategies' names, declared without torch or numba, so that a spec file or
a command line is checked against them cheaply. Each is the ``name`` of one reader class
that :mod:`engram.ssd.readers` registers (a test may register more, for its own use)."""

READ_STRATEGIES = ("mmap", "pread", "direct")
DEFAULT_READER = "mmap"
