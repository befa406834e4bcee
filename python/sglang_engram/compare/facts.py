"""What a point ran on: the hardware (SKU, vendor, devices), the software and the host.

On a GPU the SKU is read from the local GPU's name (``nvidia-smi`` / ``rocm-smi``, else
``torch.cuda.get_device_name``) and matched against :data:`SKUS`. On a CPU (a sweep
with ``device: cpu``) it is the CPU's model name (``/proc/cpuinfo``, else ``platform``),
the vendor is ``"cpu"`` and the one device is the host. A spec's or config's ``sku``
overrides either (a url config runs on someone else's machine).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from engram.files import GIB

# NOTE: most specific first ("GB200" before "B200", "H200" before "H20").
SKUS: tuple[tuple[str, str], ...] = (
    ("GB300", "nvidia"),
    ("GB200", "nvidia"),
    ("B300", "nvidia"),
    ("B200", "nvidia"),
    ("GH200", "nvidia"),
    ("H200", "nvidia"),
    ("H100", "nvidia"),
    ("A100", "nvidia"),
    ("MI355X", "amd"),
    ("MI350X", "amd"),
    ("MI325X", "amd"),
    ("MI300X", "amd"),
)
VENDORS = dict(SKUS)
CPU_VENDOR = "cpu"


class UnknownGpu(RuntimeError):
    pass


def sku_from_name(name: str) -> str | None:
    upper = name.upper().replace(" ", "")
    for sku, _ in SKUS:
        if sku in upper:
            return sku
    return None


def vendor_of(sku: str) -> str:
    if sku in VENDORS:
        return VENDORS[sku]
    return "amd" if sku.upper().startswith("MI") else "nvidia"


def local_gpu_name() -> str | None:
    # NOTE: the vendor tools first: asking torch creates a CUDA context in the sweep
    # process, which would sit on the GPU next to the servers it measures.
    for cmd in (
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
        ["rocm-smi", "--showproductname"],
    ):
        out = _run(cmd)
        if out:
            return out.splitlines()[0] if cmd[0] == "nvidia-smi" else out
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return None


def detect_sku(override: str | None) -> str:
    """The SKU: ``override`` if given, else the local GPU's, else :class:`UnknownGpu`."""
    if override:
        return override
    name = local_gpu_name()
    if name is None:
        raise UnknownGpu("no GPU found to name the SKU: set `sku:` in the sweep spec")
    sku = sku_from_name(name)
    if sku is None:
        raise UnknownGpu(f"unknown GPU {name!r}: set `sku:` in the sweep spec")
    return sku


@dataclass(frozen=True)
class Hardware:
    """What one point ran on, as recorded in its ``results.jsonl`` line."""

    device: str  # "gpu" | "cpu"
    sku: str
    vendor: str  # "nvidia" | "amd" | "cpu"
    num_gpus: int
    # NOTE: what throughput is divided by: the GPUs, or on a CPU the hosts (one for a
    # launch config), never zero.
    num_devices: int
    cpu_cores: int | None  # CPU: the cores the servers could use (None: not known here)

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def gpu_hardware(override: str | None, num_gpus: int) -> Hardware:
    sku = detect_sku(override)
    return Hardware("gpu", sku, vendor_of(sku), num_gpus, num_gpus, None)


def cpu_hardware(override: str | None, hosts: int = 1, *, local: bool = True) -> Hardware:
    """The CPU as the hardware: ``hosts`` machines; cores counted where it runs here."""
    sku = override or sku_from_cpu_name(local_cpu_name())
    return Hardware("cpu", sku, CPU_VENDOR, 0, hosts, usable_cores() if local else None)


def sku_from_cpu_name(name: str) -> str:
    """A CPU model name without trademarks, core count and clock: "Intel Xeon Platinum 8488C"."""
    name = re.sub(r"\((R|TM)\)|\bCPU\b|@.*$|\b\d+-Core Processor\b", " ", name, flags=re.I)
    return " ".join(name.replace("/", " ").split()) or "CPU"


def local_cpu_name() -> str:
    cpuinfo = _read("/proc/cpuinfo") or ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model") and value.strip():
            return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # NOTE: not on every platform
        return os.cpu_count() or 1


def software() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "sglang": _version("sglang"),
        "sglang_engram": _version("sglang-engram"),
        "sglang_router": _version("sglang-router"),
        "git_commit": _run(["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"]),
    }
    try:
        import torch

        facts.update(torch=torch.__version__, cuda=torch.version.cuda, rocm=torch.version.hip)
    except ImportError:
        facts.update(torch=None, cuda=None, rocm=None)
    facts["driver"] = _driver()
    return facts


def host() -> dict[str, Any]:
    meminfo: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            meminfo[key] = int(value.split()[0]) * 1024 if "kB" in value else int(value.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    return {
        "hostname": _read("/proc/sys/kernel/hostname"),
        "dram_gib": round(meminfo.get("MemTotal", 0) / GIB, 2),
        "hugepages_total": meminfo.get("HugePages_Total", 0),
        "hugepage_size_kib": meminfo.get("Hugepagesize", 0) // 1024,
        "transparent_hugepages": re.sub(r".*\[(\w+)\].*", r"\1", thp) if thp else None,
        "gpu_name": local_gpu_name(),
        "cpu_name": local_cpu_name(),
        "cpu_cores": usable_cores(),
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    nvidia = _read("/sys/module/nvidia/version")
    if nvidia:
        return f"nvidia {nvidia}"
    amd = _read("/sys/module/amdgpu/version")
    return f"amdgpu {amd}" if amd else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
