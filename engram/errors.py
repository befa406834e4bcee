"""Errors raised by the core library; each message names the thing at fault."""


class EngramError(Exception):
    """Base class of every error the core library raises on bad input."""


class EngramConfigError(EngramError, ValueError):
    """The model config's ``engram_*`` fields are missing or inconsistent."""


class EngramTableError(EngramError, ValueError):
    """A table's weights, scales, files or placement disagree with the spec."""


class EngramInputError(EngramError, ValueError):
    """Token ids or row ids out of range, or malformed batch metadata."""


class EngramRunError(EngramError, RuntimeError):
    """Running failed for a reason outside the input (the disk filled, a device failed);
    a command line exits 1 for it, 2 for the errors above."""
