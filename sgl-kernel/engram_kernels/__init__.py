"""Triton kernels of sglang-engram: fused gather + dequant (HBM and UVA host tables),
device-side row dedup, fused n-gram hashing, and host-memory registration.

Runs on NVIDIA and AMD GPUs, and on CPU tensors under the Triton interpreter (chosen at
import: see ``_jit.py``). Needs torch and Triton only -- no SGLang.
"""

from engram_kernels._jit import INTERPRET
from engram_kernels.counters import UniqueCounter
from engram_kernels.dedup import unique_rows
from engram_kernels.gather import gather_dequant, gather_fp8
from engram_kernels.hash import HashTables, hash_ids
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
    "HashTables",
    "HostTable",
    "HugePageCoverage",
    "UniqueCounter",
    "alloc_host_buffer",
    "gather_dequant",
    "gather_fp8",
    "hash_ids",
    "huge_page_coverage",
    "register_host_table",
    "unique_rows",
    "unregister_host_table",
    "warn_if_small_pages",
]
