"""madvise over many address ranges at once, and mincore (via ctypes; Linux only).

``process_madvise(2)`` on our own process applies one advice to up to 1,024 ranges per
system call (Linux >= 5.10; any advice on the calling process since 6.13). Where it is
missing or refuses the advice we fall back to one ``madvise(2)`` per range.
``MADV_POPULATE_READ`` (Linux >= 5.14) faults pages in and *returns* an error where a
plain memory access would raise SIGBUS (an I/O error, or a page past the end of a
shrunken file), which is what lets the mmap reader fail one lookup instead of the
process. All calls go through ctypes, so they run without the GIL.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os

import numpy as np

MADV_RANDOM = 1
MADV_WILLNEED = 3
MADV_DONTNEED = 4
MADV_POPULATE_READ = 22
IOV_MAX = 1024
_SYS_PROCESS_MADVISE = 440  # same number on every Linux architecture (asm-generic)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_libc.syscall.restype = ctypes.c_long


class AdviceError(OSError):
    """madvise failed on range ``index`` of the batch (``errno`` says why)."""

    def __init__(self, err: int, index: int):
        super().__init__(err, os.strerror(err))
        self.index = index


def madvise_one(addr: int, length: int, advice: int) -> None:
    while _libc.madvise(addr, length, advice) != 0:
        err = ctypes.get_errno()
        if err != errno.EINTR:
            raise OSError(err, os.strerror(err))


def supports(addr: int, advice: int) -> bool:
    """Whether the kernel accepts ``advice`` (probed on one page at ``addr``)."""
    try:
        madvise_one(addr, mmap.PAGESIZE, advice)
    except OSError as err:
        if err.errno == errno.EINVAL:
            return False
        raise
    return True


class RangeAdvisor:
    """Applies an advice to many ranges of this process's memory."""

    def __init__(self) -> None:
        self._pidfd: int | None = None
        self._unbatched: set[int] = set()  # advices process_madvise refused here

    def advise(self, iov: np.ndarray, advice: int) -> None:
        """``iov``: uint64 ``[n, 2]`` of (address, length), page aligned."""
        i = 0
        while i < len(iov):
            part = iov[i : i + IOV_MAX]
            if advice not in self._unbatched and hasattr(os, "pidfd_open"):
                done = self._batched_call(part, advice)
                if done is not None:
                    i += done
                    if done < len(part):
                        self._one(iov, i, advice)  # raises with that range's errno
                        i += 1
                    continue
            for j in range(len(part)):
                self._one(iov, i + j, advice)
            i += len(part)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _batched_call(self, part: np.ndarray, advice: int) -> int | None:
        """Ranges fully advised, or None to fall back to one call per range."""
        if self._pidfd is None:
            self._pidfd = os.pidfd_open(os.getpid())
        part = np.ascontiguousarray(part, dtype=np.uint64)
        while True:
            r = _libc.syscall(
                ctypes.c_long(_SYS_PROCESS_MADVISE),
                ctypes.c_int(self._pidfd),
                ctypes.c_void_p(part.ctypes.data),
                ctypes.c_size_t(len(part)),
                ctypes.c_int(advice),
                ctypes.c_uint(0),
            )
            if r >= 0:
                ends = np.cumsum(part[:, 1])
                return int(np.searchsorted(ends, r, side="right"))
            err = ctypes.get_errno()
            if err == errno.EINTR:
                continue
            if err in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
                self._unbatched.add(advice)  # old kernel, or an advice it will not batch
            return None

    @staticmethod
    def _one(iov: np.ndarray, index: int, advice: int) -> None:
        addr, length = (int(v) for v in iov[index])
        try:
            madvise_one(addr, length, advice)
        except OSError as err:
            raise AdviceError(err.errno or errno.EIO, index) from None


def mincore(addr: int, length: int) -> np.ndarray:
    """One byte per page of ``[addr, addr + length)``; bit 0 set = resident."""
    pages = -(-length // mmap.PAGESIZE)
    vec = np.zeros(pages, dtype=np.uint8)
    if _libc.mincore(addr, length, vec.ctypes.data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return vec
