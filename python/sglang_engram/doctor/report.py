"""``python -m sglang_engram doctor``: what this machine and SGLang install give us."""

from __future__ import annotations

import os
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from engram.files import GIB
from sglang_engram.doctor import rocm as rocm_checks
from sglang_engram.integration import kernel_standin
from sglang_engram.integration.version_pin import PINNED_SGLANG_VERSION, installed_sglang_version
from sglang_engram.protocol.runtime import EngramRuntime, get_runtime

_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def plugin_entry_point(group: str = "sglang.srt.plugins") -> str | None:
    """Our entry point in ``group`` (the plugin, or the ``sglang serve`` backend)."""
    for ep in metadata.entry_points(group=group):
        if ep.value.startswith("sglang_engram."):
            return f"{ep.name} = {ep.value}"
    return None


def hook_report(runtime: EngramRuntime) -> dict[str, str]:
    """Register the plugin and apply every hook now (imports the hooked modules)."""
    from sglang_engram.integration import plugin
    from sglang_engram.integration.hooks import HOOKS

    plugin.register()
    for hook in HOOKS:
        if plugin.hook_status(runtime.hooks).get(hook.target) != "applied":
            plugin.apply_hook(runtime, hook)
    status = plugin.hook_status(runtime.hooks)
    return {hook.target: status.get(hook.target, "not registered") for hook in HOOKS}


def serving_report(placements: list[str]) -> dict[str, dict[str, str]]:
    """Per placement, which code serves each model family's tables (keyed by family
    name; ``<name> with --engram-hot-cache-gb`` where the HBM hot cache changes it)."""
    from sglang_engram.protocol.registry import families
    from sglang_engram.protocol.server_config import EngramServerConfig

    report: dict[str, dict[str, str]] = {}
    for name in placements:
        plain, cached = EngramServerConfig(offload=name), EngramServerConfig(name, hot_cache_gb=1)
        who = report[name] = {}
        for family in families():
            who[family.name] = family.implementation(plain)
            if family.implementation(cached) != who[family.name]:
                who[f"{family.name} with --engram-hot-cache-gb"] = family.implementation(cached)
    return report


def families_report() -> list[dict[str, Any]]:
    """Every model family the plugin knows: its title, its tables, whether it places them."""
    from sglang_engram.protocol.registry import families

    return [
        {"name": f.name, "title": f.title, "tables": f.tables, "served": f.served}
        for f in families()
    ]


def kernel_report(runtime: EngramRuntime) -> dict[str, Any]:
    """Whether this process imports the real ``sgl_kernel`` or the plugin's stand-in, and
    the DeepSeek-V4 ops the plugin stands in for on SGLang's CPU engine."""
    from sglang_engram.integration.kernel_standin.dsv4 import DSV4_STANDINS

    status = kernel_standin.status(runtime)
    return {
        "standin": status.standin,
        "detail": status.detail,
        "line": status.describe(),
        "dsv4_standins": list(DSV4_STANDINS),
        "dsv4_line": "DeepSeek-V4 on SGLang's CPU engine: plain-torch STAND-INS for "
        f"{', '.join(DSV4_STANDINS)} (sliding-window layers; elsewhere upstream's kernels)",
    }


def gpu_report() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"available": False, "why": "torch is not installed"}
    if not torch.cuda.is_available():
        return {"available": False, "why": "no CUDA or ROCm device visible to torch"}
    free, total = torch.cuda.mem_get_info()
    props = torch.cuda.get_device_properties(0)
    return {
        "available": True,
        "name": props.name,
        "count": torch.cuda.device_count(),
        "memory_gib": round(total / GIB, 2),
        "free_gib": round(free / GIB, 2),
        "rocm": torch.version.hip is not None,
    }


def host_memory_report() -> dict[str, Any]:
    meminfo: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            meminfo[key] = int(value.split()[0])
    except OSError:
        pass
    kib = 1 << 20  # KiB per GiB
    report: dict[str, Any] = {
        "total_gib": round(meminfo.get("MemTotal", 0) / kib, 2),
        "available_gib": round(meminfo.get("MemAvailable", 0) / kib, 2),
        "hugepages_total": meminfo.get("HugePages_Total", 0),
        "hugepages_free": meminfo.get("HugePages_Free", 0),
        "hugepage_size_kib": meminfo.get("Hugepagesize", 0),
        "transparent_hugepages": _thp_mode(),
    }
    if Path("/dev/shm").exists():
        report["dev_shm_gib"] = round(shutil.disk_usage("/dev/shm").total / GIB, 2)
    return report


def _thp_mode() -> str:
    try:
        text = _THP.read_text()
    except OSError:
        return "unknown"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else text.strip()


def advice(report: dict[str, Any]) -> list[str]:
    notes = []
    sglang = report["sglang"]
    if sglang["installed"] != sglang["pinned"]:
        notes.append(f"install sglang=={sglang['pinned']} (found {sglang['installed']})")
    if not report["entry_point"]:
        notes.append("the sglang.srt.plugins entry point is missing: reinstall sglang-engram")
    if not report["serve_backend"]:
        notes.append("the sglang.serve_backends entry point is missing: reinstall sglang-engram")
    if any(not s.startswith("applied") for s in report["hooks"].values()):
        notes.append("some hooks did not apply: see their reasons above")
    host = report["host_memory"]
    if host["transparent_hugepages"] == "never" and not host["hugepages_total"]:
        notes.append(
            "no huge pages (THP 'never', no hugetlbfs pages): dram-placed Engram lookups "
            "can be ~10x slower; enable THP (madvise) or reserve huge pages"
        )
    if host.get("dev_shm_gib", 1) < 1:
        notes.append("/dev/shm is under 1 GiB (Docker default 64 MiB): run with --shm-size")
    if not report["gpu"]["available"]:
        notes.append(
            f"no GPU ({report['gpu']['why']}): serve on SGLang's CPU engine, "
            "SGLANG_USE_CPU_ENGINE=1 python -m sglang.launch_server --device cpu ..."
        )
    return notes


def collect(apply_hooks: bool = True) -> dict[str, Any]:
    """Everything ``doctor`` reports, about this process (its plugin runtime) and machine."""
    from engram.tables import placement_names

    # NOTE: the doctor's process serves nothing: it reads what registration left in
    # this process's runtime.
    runtime = get_runtime()
    report: dict[str, Any] = {
        "sglang": {"installed": installed_sglang_version(), "pinned": PINNED_SGLANG_VERSION},
        "entry_point": plugin_entry_point(),
        "serve_backend": plugin_entry_point("sglang.serve_backends"),
        "placements": placement_names(),
        "families": families_report(),
        "serving": serving_report(placement_names()),
        "hooks": hook_report(runtime) if apply_hooks else {},
        "sgl_kernel": kernel_report(runtime),
        "gpu": gpu_report(),
        "host_memory": host_memory_report(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "host_tables": rocm_checks.collect(),
    }
    report["advice"] = advice(report) + report["host_tables"]["advice"]
    return report


def _served_by(family: dict[str, Any], who: dict[str, str]) -> str:
    plain = who[family["name"]]
    cached = who.get(f"{family['name']} with --engram-hot-cache-gb")
    return plain if cached is None else f"{plain}; {cached} with --engram-hot-cache-gb > 0"


def render(report: dict[str, Any]) -> str:
    lines = [
        f"SGLang: {report['sglang']['installed']} (pinned {report['sglang']['pinned']})",
        f"entry point: {report['entry_point'] or 'MISSING'}",
        f"sglang serve backend: {report['serve_backend'] or 'MISSING'}",
        f"placements: {', '.join(report['placements'])}",
        *(
            f"  {name:<5} "
            + "; ".join(
                f"{family['title']}: {_served_by(family, who)}"
                for family in report["families"]
                if family["served"]
            )
            for name, who in report["serving"].items()
        ),
        *(
            f"  {family['title']} ({family['tables']}): {who_serves}"
            for family in report["families"]
            if not family["served"]
            for who_serves in {report["serving"][report["placements"][0]][family["name"]]}
        ),
        "hooks:",
        *(
            f"  {status:<8} {target}"
            if status in ("applied", "pending")
            else f"  FAILED   {target}: {status}"
            for target, status in report["hooks"].items()
        ),
    ]
    lines += [report["sgl_kernel"]["line"], report["sgl_kernel"]["dsv4_line"]]
    gpu = report["gpu"]
    if gpu["available"]:
        lines.append(
            f"GPU: {gpu['name']} x{gpu['count']}, {gpu['memory_gib']} GiB "
            f"({gpu['free_gib']} GiB free){' ROCm' if gpu['rocm'] else ''}"
        )
    else:
        lines.append(f"GPU: none ({gpu['why']})")
    host = report["host_memory"]
    # NOTE: two kinds of huge pages: transparent ones (THP, what dram tables get by
    # default) and the reserved hugetlbfs pool (vm.nr_hugepages), often empty.
    lines.append(
        f"host memory: {host['total_gib']} GiB ({host['available_gib']} GiB available); "
        f"transparent huge pages (THP): {host['transparent_hugepages']}; hugetlbfs pool: "
        f"{host['hugepages_free']} of {host['hugepages_total']} pages free "
        f"({host['hugepage_size_kib']} KiB each); /dev/shm {host.get('dev_shm_gib', '?')} GiB"
    )
    lines += rocm_checks.render(report["host_tables"])
    lines += [f"advice: {note}" for note in report["advice"]] or ["advice: none"]
    return "\n".join(lines)
