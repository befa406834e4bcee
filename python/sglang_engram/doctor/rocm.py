"""What ``dram`` host tables need from the machine, ROCm first (``doctor`` calls these).

- ``HSA_XNACK``: with XNACK on, the GPU may fault on pinned host tables when the kernel
  migrates or collapses their pages (``VM_L2_PROTECTION_FAULT``); ``HSA_XNACK=0`` is immune.
- The device address of registered host memory: on HIP it can differ from the host
  address, and kernels must use the device one (``engram_kernels.host_memory`` does).
- Huge pages: a fresh host buffer, allocated as a dram table is and touched, is read back
  from ``/proc/self/smaps`` (transparent huge pages, or hugetlbfs pages if it got those).

Each check uses the kernels' own helpers (``engram_kernels.gpu_runtime``,
``engram_kernels.hugepages``); none of them changes anything on the machine.
"""

from __future__ import annotations

import os
from typing import Any

PROBE_BYTES = 4 << 20


def xnack(rocm: bool, env: dict[str, str] | None = None) -> dict[str, Any]:
    value = (os.environ if env is None else env).get("HSA_XNACK")
    if not rocm:
        return {"value": value, "ok": True, "advice": None}
    if value == "0":
        return {"value": value, "ok": True, "advice": None}
    why = "HSA_XNACK=1" if value == "1" else "HSA_XNACK is unset (the driver's default applies)"
    return {
        "value": value,
        "ok": False,
        "advice": f"{why}: with XNACK on, pinned host (dram) tables can fault when the "
        "kernel migrates or collapses their pages; run the server with HSA_XNACK=0",
    }


def device_address() -> dict[str, Any]:
    """Register a small host buffer and read its device address back."""
    import torch

    if not torch.cuda.is_available():
        return {"checked": False, "why": "no GPU"}
    from engram_kernels.gpu_runtime import gpu_runtime
    from engram_kernels.hugepages import alloc_host_buffer

    torch.cuda.init()
    buf = alloc_host_buffer(PROBE_BYTES)
    host = buf.data_ptr()
    try:
        runtime = gpu_runtime()
        registered = runtime.register(host, PROBE_BYTES, read_only=False)
        try:
            device = runtime.device_pointer(host)
        finally:
            if registered:
                runtime.unregister(host)
    except RuntimeError as exc:  # the runtime's registration calls failed
        return {"checked": True, "ok": False, "error": str(exc)}
    return {"checked": True, "ok": True, "host": hex(host), "device": hex(device),
            "same": device == host, "api": runtime.api}  # fmt: skip


def huge_pages() -> dict[str, Any]:
    """How much of a fresh, touched host buffer huge pages back."""
    from engram_kernels.hugepages import (
        FIX_HINT,
        MIN_HUGE_FRACTION,
        alloc_host_buffer,
        huge_page_coverage,
    )

    buf = alloc_host_buffer(PROBE_BYTES)
    buf.fill_(1)  # NOTE: pages (huge or not) only exist once touched
    fraction = huge_page_coverage(buf.data_ptr(), PROBE_BYTES).fraction
    ok = fraction is not None and fraction >= MIN_HUGE_FRACTION
    advice = None
    if not ok:
        seen = "unknown (no smaps)" if fraction is None else f"only {fraction:.0%}"
        advice = f"huge pages back {seen} of a fresh host buffer: {FIX_HINT}"
    return {"fraction": fraction, "ok": ok, "advice": advice}


def collect() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"rocm": False, "advice": ["torch is not installed: no host-table checks"]}
    rocm = torch.version.hip is not None
    report: dict[str, Any] = {
        "rocm": rocm,
        "gpu": torch.cuda.is_available(),
        "xnack": xnack(rocm),
        "device_address": device_address(),
        "huge_pages": huge_pages(),
    }
    advice = [report["xnack"]["advice"], report["huge_pages"]["advice"]]
    addr = report["device_address"]
    if addr.get("checked") and not addr["ok"]:
        advice.append(f"registering host memory failed: {addr['error']}")
    report["advice"] = [a for a in advice if a]
    return report


def render(report: dict[str, Any]) -> list[str]:
    if "xnack" not in report:
        return []
    addr = report["device_address"]
    if not addr.get("checked"):
        where = f"not checked ({addr.get('why')})"
    elif addr["ok"]:
        rel = "same as" if addr["same"] else "differs from"
        where = f"device address {addr['device']} {rel} host {addr['host']} ({addr['api']})"
    else:
        where = f"registration FAILED: {addr['error']}"
    fraction = report["huge_pages"]["fraction"]
    huge = "unknown" if fraction is None else f"{fraction:.0%}"
    xn = report["xnack"]["value"]
    if report["rocm"]:
        xnack_text = f"HSA_XNACK={xn if xn is not None else 'unset'}"
    else:
        xnack_text = "n/a (CUDA)" if report.get("gpu") else "not checked (no GPU)"
    return [
        f"host tables: XNACK {xnack_text}; registered host memory: {where}; "
        f"a fresh {PROBE_BYTES >> 20} MiB host buffer (allocated as dram tables are) is "
        f"{huge} on huge pages"
    ]
