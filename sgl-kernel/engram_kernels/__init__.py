"""Triton kernels of sglang-engram: gather + dequant of FP8 Engram rows (HBM and UVA host
tables, with a sort-based dedup on the device) and host-memory mapping.

Runs on NVIDIA and AMD GPUs, and on CPU tensors under the Triton interpreter (chosen at
import: see ``_jit.py``). Imports torch and Triton only -- neither ``engram`` nor SGLang
(test/kernels/test_imports.py checks it); bad input raises ``ValueError``, a failing
GPU runtime call ``RuntimeError``.
"""

from engram_kernels._jit import INTERPRET
from engram_kernels.counters import UniqueCounter
from engram_kernels.gather import gather_dequant
from engram_kernels.host_memory import HostTable, register_host_table, unregister_host_table
from engram_kernels.hugepages import (
    HugePageCoverage,
    alloc_host_buffer,
    huge_page_coverage,
    warn_if_small_pages,
)
from engram_kernels.operands import DeviceView

__all__ = [
    "INTERPRET",
    "DeviceView",
    "HostTable",
    "HugePageCoverage",
    "UniqueCounter",
    "alloc_host_buffer",
    "gather_dequant",
    "huge_page_coverage",
    "register_host_table",
    "unregister_host_table",
    "warn_if_small_pages",
]
