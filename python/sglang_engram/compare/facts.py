"""What a point ran on: the GPU (SKU, vendor), the software and the host.

The SKU is read from the local GPU's name (``nvidia-smi`` / ``rocm-smi``, else
``torch.cuda.get_device_name``) and matched against :data:`SKUS`; a spec's or config's
``sku`` overrides it (a url config runs on someone else's machine).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
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


@functools.cache
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
