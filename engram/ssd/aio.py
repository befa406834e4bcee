"""Linux native AIO (``io_setup`` / ``io_submit`` / ``io_getevents``) through ctypes.

With ``O_DIRECT`` a whole batch of reads goes to the disk in one system call and the
caller sleeps once until they are all in: a deep queue without threads and without the
page cache. The request blocks (``struct iocb``) are built for the whole batch at once
in a numpy structured array, the completions read back the same way. Every call runs
without the GIL (ctypes releases it). The x86-64 and aarch64 system call numbers are
those of the kernel's tables; the structures are the kernel ABI (little-endian).

NOTE: io_uring would do the same; its Python bindings on the package registry do not
install and work here (see :mod:`engram.ssd`), and this ABI needs no library.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

import numpy as np

_SYSCALLS = {
    "x86_64": {"io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209},
    "aarch64": {"io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_getevents": 4},
}
IOCB_CMD_PREAD = 0
IOCB = np.dtype(
    [
        ("data", "<u8"),
        ("key", "<u4"),
        ("rw_flags", "<i4"),
        ("opcode", "<u2"),
        ("reqprio", "<i2"),
        ("fildes", "<u4"),
        ("buf", "<u8"),
        ("nbytes", "<u8"),
        ("offset", "<i8"),
        ("reserved2", "<u8"),
        ("flags", "<u4"),
        ("resfd", "<u4"),
    ]
)
EVENT = np.dtype([("data", "<u8"), ("obj", "<u8"), ("res", "<i8"), ("res2", "<i8")])
assert IOCB.itemsize == 64 and EVENT.itemsize == 32

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def supported() -> bool:
    """Whether this machine has the AIO system calls (Linux on x86-64 or aarch64)."""
    if platform.system() != "Linux" or platform.machine() not in _SYSCALLS:
        return False
    try:
        AioContext(1).close()
    except OSError:
        return False
    return True


def _call(name: str, *args: object) -> int:
    """The system call's result; retried on EINTR, an OSError on any other failure."""
    number = _SYSCALLS[platform.machine()][name]
    while True:
        r = _libc.syscall(ctypes.c_long(number), *args)
        if r >= 0:
            return r
        err = ctypes.get_errno()
        if err != errno.EINTR:
            raise OSError(err, f"{name}: {os.strerror(err)}")


class AioContext:
    """One kernel AIO context with room for ``depth`` reads in flight; use it from one
    thread at a time (completions are not told apart by caller)."""

    def __init__(self, depth: int = 1024):
        self.depth = depth
        self._ctx = ctypes.c_ulong(0)
        _call("io_setup", ctypes.c_uint(depth), ctypes.byref(self._ctx))

    def read(
        self, fd: int, buffers: np.ndarray, lengths: np.ndarray, offsets: np.ndarray
    ) -> np.ndarray:
        """Read ``lengths[i]`` bytes at file offset ``offsets[i]`` into address
        ``buffers[i]``, all in flight together (``depth`` at a time); returns each read's
        result in order: bytes read, or ``-errno``."""
        n = len(offsets)
        iocbs = np.zeros(n, IOCB)
        iocbs["opcode"] = IOCB_CMD_PREAD
        iocbs["fildes"] = fd
        iocbs["buf"] = buffers
        iocbs["nbytes"] = lengths
        iocbs["offset"] = offsets
        iocbs["data"] = np.arange(n, dtype=np.uint64)
        pointers = iocbs.ctypes.data + np.arange(n, dtype=np.uint64) * np.uint64(IOCB.itemsize)
        events = np.zeros(n, EVENT)
        submitted = reaped = 0
        try:
            while reaped < n:
                room = min(n - submitted, self.depth - (submitted - reaped))
                if room:
                    where = ctypes.c_void_p(pointers.ctypes.data + submitted * 8)
                    try:
                        submitted += _call("io_submit", self._ctx, ctypes.c_long(room), where)
                    except OSError as err:
                        if err.errno != errno.EAGAIN or submitted == reaped:
                            raise
                reaped += self._reap(events, reaped, submitted - reaped, 1)
        finally:
            # NOTE: reads still in flight write into the caller's buffers: never return
            # (or raise) before the kernel is done with them.
            while reaped < submitted:
                reaped += self._reap(events, reaped, submitted - reaped, submitted - reaped)
        results = np.empty(n, dtype=np.int64)
        results[events["data"].astype(np.int64)] = events["res"]
        return results

    def _reap(self, events: np.ndarray, start: int, most: int, least: int) -> int:
        out = ctypes.c_void_p(events.ctypes.data + start * EVENT.itemsize)
        return _call(
            "io_getevents", self._ctx, ctypes.c_long(least), ctypes.c_long(most), out, None
        )

    def close(self) -> None:
        if self._ctx.value:
            _call("io_destroy", self._ctx)
            self._ctx = ctypes.c_ulong(0)
