"""Linux native AIO (``io_setup`` / ``io_submit`` / ``io_getevents``) through ctypes.

With ``O_DIRECT`` a whole batch of reads goes to the disk in one system call and the
caller sleeps once until they are all in: a deep queue without threads and without the
page cache. The request blocks (``struct iocb``) are filled for the whole batch at once
in a numpy structured array kept from call to call, the completions read back the same
way. Every call runs
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
    thread at a time (completions are not told apart by caller). Its request and
    completion arrays are kept from call to call (grown, never shrunk)."""

    def __init__(self, depth: int = 1024):
        self.depth = depth
        self._ctx = ctypes.c_ulong(0)
        _call("io_setup", ctypes.c_uint(depth), ctypes.byref(self._ctx))
        self._room = 0
        self._reserve(256)

    def _reserve(self, n: int) -> None:
        if n <= self._room:
            return
        room = max(n, 2 * self._room)
        self._iocbs = np.zeros(room, IOCB)
        self._iocbs["opcode"] = IOCB_CMD_PREAD
        self._iocbs["data"] = np.arange(room, dtype=np.uint64)
        self._pointers = self._iocbs.ctypes.data + np.arange(room, dtype=np.uint64) * np.uint64(
            IOCB.itemsize
        )
        self._events = np.zeros(room, EVENT)
        self._results = np.empty(room, dtype=np.int64)
        self._room = room
        self._n = self._submitted = self._reaped = 0

    def start(self, fd: int, base: int, runs: np.ndarray, block_bytes: int) -> None:
        """Start reading each run ``(first block, count, slot)`` of ``runs`` (int64
        ``[n, 3]``) from ``fd`` into the buffer at address ``base``, ``slot`` blocks in
        (``depth`` in flight at a time); :meth:`finish` waits for them."""
        n = len(runs)
        self._reserve(n)
        iocbs = self._iocbs[:n]
        iocbs["fildes"] = fd
        np.multiply(runs[:, 2], block_bytes, out=iocbs["buf"], casting="unsafe")
        iocbs["buf"] += np.uint64(base)
        np.multiply(runs[:, 1], block_bytes, out=iocbs["nbytes"], casting="unsafe")
        np.multiply(runs[:, 0], block_bytes, out=iocbs["offset"])
        self._n, self._submitted, self._reaped = n, 0, 0
        self._submit()

    def finish(self) -> np.ndarray:
        """Wait for the reads :meth:`start` began; returns each read's result in order
        (valid until the next start): bytes read, or ``-errno``."""
        n = self._n
        try:
            while self._reaped < n:
                # NOTE: once all are in flight, one call sleeps until all are done.
                all_in = self._submitted == n
                self._reap(self._submitted - self._reaped if all_in else 1)
                self._submit()
        finally:
            self.drain()
        results = self._results[:n]
        results[self._events["data"][:n]] = self._events["res"][:n]
        return results

    def drain(self) -> None:
        """Wait for every read in flight (and submit no more).

        NOTE: reads in flight write into the caller's buffers: never let a buffer go (or
        an error out) before the kernel is done with them."""
        while self._reaped < self._submitted:
            self._reap(self._submitted - self._reaped)
        self._n = self._submitted

    def read_runs(self, fd: int, base: int, runs: np.ndarray, block_bytes: int) -> np.ndarray:
        """:meth:`start` then :meth:`finish`."""
        self.start(fd, base, runs, block_bytes)
        return self.finish()

    def _submit(self) -> None:
        room = min(self._n - self._submitted, self.depth - (self._submitted - self._reaped))
        if room <= 0:
            return
        where = ctypes.c_void_p(self._pointers.ctypes.data + self._submitted * 8)
        try:
            self._submitted += _call("io_submit", self._ctx, ctypes.c_long(room), where)
        except OSError as err:
            if err.errno != errno.EAGAIN or self._submitted == self._reaped:
                raise

    def _reap(self, least: int) -> None:
        most = self._submitted - self._reaped
        out = ctypes.c_void_p(self._events.ctypes.data + self._reaped * EVENT.itemsize)
        self._reaped += _call(
            "io_getevents", self._ctx, ctypes.c_long(least), ctypes.c_long(most), out, None
        )

    def close(self) -> None:
        if self._ctx.value:
            _call("io_destroy", self._ctx)
            self._ctx = ctypes.c_ulong(0)
