"""How engram_kernels runs Triton: compiled on a GPU, interpreted on CPU tensors.

NOTE: Triton fixes at decoration time whether a kernel is compiled or interpreted, so
the choice is made once, when this package is imported: ``TRITON_INTERPRET`` wins when
set; otherwise the kernels are interpreted exactly when torch sees no GPU (they could
not run anywhere else). Every kernel of the package is decorated with :func:`kernel`,
which keeps helper functions and the kernels calling them in the same mode.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


def _interpreting() -> bool:
    flag = os.environ.get("TRITON_INTERPRET", "").strip().lower()
    if flag:
        return flag not in ("0", "false", "off", "no")
    return not torch.cuda.is_available()


INTERPRET = _interpreting()


def kernel(fn: Callable | None = None, *, sizes: tuple[str, ...] = ()) -> Callable:
    """``triton.jit``, or the Triton interpreter when this process interprets.

    ``sizes`` names integer arguments that vary from launch to launch (batch sizes,
    masks): Triton then compiles no variant per value (divisible by 16, equal to 1),
    so one compilation serves every size.

    NOTE: this is what lets a CUDA graph capture a lookup: loading a newly compiled
    kernel is not allowed while a stream is capturing, so every variant a capture
    launches must have been launched eagerly first (see ``lookup.warm_up``).
    """

    def wrap(f: Callable) -> Callable:
        if INTERPRET:
            return InterpretedFunction(f)
        return triton.jit(f, do_not_specialize=list(sizes))

    return wrap(fn) if fn is not None else wrap


def block(gpu: int, interpreted: int) -> int:
    """A block size: the interpreter pays per operation, not per lane, so it takes
    bigger blocks (fewer programs)."""
    return interpreted if INTERPRET else gpu


@kernel
def _add(a, b):
    return a + b


# NOTE: not ``tl.sum``: Triton's own jit helpers follow ``TRITON_INTERPRET`` as it was
# when *triton* was imported, which need not match this package's mode. Triton's sum
# combiner is reused when present because the interpreter recognises it (numpy sum).
_SUM = getattr(tl.standard, "_sum_combine", _add)


@kernel
def count_true(mask):
    """Set lanes of a 1-D mask, as an int32 scalar."""
    return tl.reduce(mask.to(tl.int32), 0, _SUM)


def launch_device(*tensors: torch.Tensor | None) -> torch.device:
    """The one device all ``tensors`` live on, checked against the launch mode."""
    devices = {t.device for t in tensors if t is not None}
    if len(devices) != 1:
        raise ValueError(
            f"kernel operands must live on one device, got {sorted(map(str, devices))}"
        )
    device = devices.pop()
    if device.type == "cpu" and not INTERPRET:
        raise ValueError(
            "CPU tensors run only under the Triton interpreter: set TRITON_INTERPRET=1 "
            "before importing engram_kernels, or pass GPU tensors"
        )
    if device.type != "cpu" and INTERPRET:
        raise ValueError(
            f"engram_kernels is in Triton interpreter mode and runs on CPU tensors only, "
            f"got {device}; unset TRITON_INTERPRET to run on the GPU"
        )
    return device


@contextlib.contextmanager
def on_device(device: torch.device) -> Iterator[None]:
    """Make ``device`` current for the launch (Triton launches on the current device)."""
    if device.type == "cpu":
        yield
        return
    with torch.cuda.device(device):
        yield


def grid_for(n: int, block: int) -> tuple[int]:
    return (max(1, triton.cdiv(n, block)),)
