"""Host-memory registration through the GPU runtime torch already loaded.

CUDA: ``cudaHostRegister`` + ``cudaHostGetDevicePointer`` from ``libcudart``; ROCm:
the ``hip*`` equivalents from ``libamdhip64``. The library is the one already mapped
into this process (found in ``/proc/self/maps``).

NOTE: loading a second libamdhip64 (another ROCm version) next to torch's crashes the
process, so this module never loads a runtime by name; it opens the exact file torch
mapped, which ``dlopen`` resolves to the already-loaded copy.
"""

from __future__ import annotations

import ctypes
import functools
import re
from pathlib import Path

import torch

REGISTER_PORTABLE = 0x1
REGISTER_MAPPED = 0x2
REGISTER_READ_ONLY = 0x8
_LIBRARIES = {
    "cuda": re.compile(r"/libcudart\.so[0-9.]*$"),
    "hip": re.compile(r"/libamdhip64\.so[0-9.]*$"),
}


def runtime_api() -> str:
    """``"hip"`` on a ROCm build of torch, else ``"cuda"``."""
    return "hip" if torch.version.hip else "cuda"


def loaded_library(api: str, maps: str | Path = "/proc/self/maps") -> str | None:
    """Path of ``api``'s runtime library mapped into this process, if any."""
    pattern = _LIBRARIES[api]
    for line in Path(maps).read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and pattern.search(fields[5]):
            return fields[5]
    return None


class GpuRuntime:
    """The few runtime calls host tables need, with errors named by the runtime."""

    def __init__(self, api: str, library: str):
        self.api = api
        self.library = library
        self._lib = ctypes.CDLL(library)
        for name, args in (
            ("HostRegister", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]),
            ("HostUnregister", [ctypes.c_void_p]),
            (
                "HostGetDevicePointer",
                [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint],
            ),
            ("GetLastError", []),
        ):
            fn = getattr(self._lib, api + name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        name_fn = getattr(self._lib, api + "GetErrorName")
        name_fn.argtypes, name_fn.restype = [ctypes.c_int], ctypes.c_char_p
        self._error_name = name_fn

    def error_name(self, code: int) -> str:
        name = self._error_name(code)
        return name.decode() if name else f"error {code}"

    def register(self, ptr: int, nbytes: int, *, read_only: bool) -> bool:
        """Page-lock and map ``[ptr, ptr + nbytes)`` for every device. ``False`` when the
        runtime says it was registered already (then it is not ours to unregister)."""
        flags = REGISTER_PORTABLE | REGISTER_MAPPED | (REGISTER_READ_ONLY if read_only else 0)
        code = self._call("HostRegister", ctypes.c_void_p(ptr), nbytes, flags)
        if code == 0:
            return True
        name = self.error_name(code)
        if name.endswith("HostMemoryAlreadyRegistered"):
            return False
        hint = " (is the locked-memory limit, ulimit -l, high enough?)" if "Memory" in name else ""
        raise RuntimeError(
            f"{self.api}HostRegister of {nbytes:,} bytes at {ptr:#x} failed: {name}{hint}"
        )

    def mapped_pointer(self, ptr: int) -> int | None:
        """The device address of host address ``ptr`` when the runtime maps it already
        (page-locked by ``cudaHostAlloc``, torch's ``pin_memory()`` or a registration),
        else None (plain pageable memory)."""
        address, _ = self._device_pointer(ptr)
        return address

    def device_pointer(self, ptr: int) -> int:
        address, code = self._device_pointer(ptr)
        if address is None:
            raise RuntimeError(
                f"{self.api}HostGetDevicePointer({ptr:#x}) failed: {self.error_name(code)}"
            )
        return address

    def _device_pointer(self, ptr: int) -> tuple[int | None, int]:
        out = ctypes.c_void_p()
        code = self._call("HostGetDevicePointer", ctypes.byref(out), ctypes.c_void_p(ptr), 0)
        return (int(out.value) if code == 0 and out.value else None), code

    def unregister(self, ptr: int) -> None:
        code = self._call("HostUnregister", ctypes.c_void_p(ptr))
        if code != 0:
            raise RuntimeError(
                f"{self.api}HostUnregister({ptr:#x}) failed: {self.error_name(code)}"
            )

    def _call(self, name: str, *args: object) -> int:
        code = getattr(self._lib, self.api + name)(*args)
        if code != 0:
            # NOTE: clear the runtime's last error, or torch reports it after its next
            # kernel launch as if that kernel had failed.
            getattr(self._lib, self.api + "GetLastError")()
        return code


@functools.cache
def gpu_runtime() -> GpuRuntime:
    """The runtime of this process's torch build (its library must already be loaded)."""
    api = runtime_api()
    library = loaded_library(api)
    if library is None:
        raise RuntimeError(
            f"torch has not loaded the {api} runtime library into this process "
            "(a CPU-only torch build?); host tables need a GPU build of torch"
        )
    return GpuRuntime(api, library)
