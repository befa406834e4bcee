"""Read a cluster spec from YAML and check it; every error names the key at fault.

Checks: unknown keys (with the closest known one), types, roles, GPU counts that no
server could use, Engram options that do not fit the placement, flags in extra_args that
the launcher sets itself, and port ranges that overlap. Questionable but legal choices
(Engram off on a prefill worker, the fake transfer backend) become warnings.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

import yaml

from sglang_engram.cluster.spec import (
    ENGRAM_OFFLOADS,
    MANAGED_ROUTER_FLAGS,
    MANAGED_WORKER_FLAGS,
    NAME_PATTERN,
    ROLES,
    ROUTER_POLICIES,
    TRANSFER_BACKENDS,
    ClusterSpec,
    ClusterSpecError,
    RouterSpec,
    WorkerGroup,
)
from sglang_engram.cluster.supervisor import RestartPolicy
from sglang_engram.config import DEFAULT_OFFLOAD

_TOP_KEYS = {
    "name": str,
    "model": str,
    "transfer_backend": str,
    "router": dict,
    "workers": list,
    "base_port": int,
    "bootstrap_base_port": int,
    "restart": dict,
    "log_dir": str,
}
_GROUP_KEYS = {
    "name": str,
    "role": str,
    "count": int,
    "tp_size": int,
    "gpus_per_worker": (int, float),
    "engram_offload": str,
    "engram_ssd_dir": str,
    "engram_prefetch": bool,
    "engram_hot_cache_gb": (int, float),
    "engram_ram_cache_gb": (int, float),
    "extra_args": list,
}
_KINDS = {str: "string", int: "whole number", bool: "boolean", dict: "mapping", list: "list"}
_ROUTER_KEYS = {"port": int, "policy": str, "prometheus_port": int, "extra_args": list}
_RESTART_KEYS = {"max_restarts": int, "backoff_s": (int, float), "max_backoff_s": (int, float)}


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and check a spec file; the name defaults to the file's stem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterSpecError(f"cannot read spec {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterSpecError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ClusterSpecError(f"{path}: the spec must be a mapping of keys to values")
    return parse_spec(data, default_name=path.stem)


def parse_spec(data: dict[str, Any], *, default_name: str = "cluster") -> ClusterSpec:
    _check_keys(data, _TOP_KEYS, "spec")
    warnings: list[str] = []
    for key in ("model", "transfer_backend", "workers"):
        if key not in data:
            raise ClusterSpecError(f"spec: missing required key '{key}'")
    name = str(data.get("name", default_name)).lower().replace("_", "-")
    if not NAME_PATTERN.match(name):
        raise ClusterSpecError(
            f"spec: name {name!r} must use lowercase letters, digits and '-' "
            "(it names the Ray namespace and the log directory)"
        )
    backend = data["transfer_backend"]
    if backend not in TRANSFER_BACKENDS:
        raise ClusterSpecError(
            f"spec: transfer_backend {backend!r} is not one of {', '.join(TRANSFER_BACKENDS)}"
        )
    if backend == "fake":
        warnings.append(
            "transfer_backend fake moves no KV cache between prefill and decode; "
            "it is for tests only"
        )
    if not data["workers"]:
        raise ClusterSpecError("spec: 'workers' lists no worker group")
    groups = tuple(_parse_group(g, i, warnings) for i, g in enumerate(data["workers"]))
    names = [g.name for g in groups]
    for n in names:
        if names.count(n) > 1:
            raise ClusterSpecError(
                f"spec: two worker groups are named {n!r}; give each group a distinct 'name'"
            )
    roles = {g.role for g in groups}
    for role in ROLES:
        if role not in roles:
            raise ClusterSpecError(
                f"spec: no {role} worker group; PD disaggregation needs at least one "
                "prefill and one decode worker"
            )
    router = _parse_router(data.get("router", {}))
    restart = _parse_restart(data.get("restart", {}))
    spec = ClusterSpec(
        name=name,
        model=data["model"],
        transfer_backend=backend,
        groups=groups,
        router=router,
        base_port=data.get("base_port", 30000),
        bootstrap_base_port=data.get("bootstrap_base_port", 8998),
        restart=restart,
        log_dir=data.get("log_dir"),
        warnings=tuple(warnings),
    )
    _check_ports(spec)
    return spec


def _parse_group(raw: Any, index: int, warnings: list[str]) -> WorkerGroup:
    where = f"workers[{index}]"
    if not isinstance(raw, dict):
        raise ClusterSpecError(f"{where}: each worker group must be a mapping")
    if raw.get("engram_offload") is False:
        # NOTE: YAML 1.1 reads a bare `off` as false; `engram_offload: off` means "off".
        raw = {**raw, "engram_offload": "off"}
    name = str(raw.get("name", raw.get("role", "?")))
    where = f"{where} ({name})"
    _check_keys(raw, _GROUP_KEYS, where)
    role = raw.get("role")
    if role not in ROLES:
        raise ClusterSpecError(f"{where}: role must be prefill or decode, not {role!r}")
    if not NAME_PATTERN.match(name):
        raise ClusterSpecError(f"{where}: name must use lowercase letters, digits and '-'")
    count, tp = raw.get("count", 1), raw.get("tp_size", 1)
    if count < 1:
        raise ClusterSpecError(f"{where}: count must be at least 1, not {count}")
    if tp < 1:
        raise ClusterSpecError(f"{where}: tp_size must be at least 1, not {tp}")
    gpus = raw.get("gpus_per_worker", tp)
    _check_gpus(where, gpus, tp)
    offload = raw.get("engram_offload", DEFAULT_OFFLOAD)
    if offload not in ENGRAM_OFFLOADS:
        raise ClusterSpecError(
            f"{where}: engram_offload {offload!r} is not one of {', '.join(ENGRAM_OFFLOADS)}"
        )
    group = WorkerGroup(
        name=name,
        role=role,
        count=count,
        tp_size=tp,
        gpus_per_worker=gpus,
        engram_offload=offload,
        engram_ssd_dir=raw.get("engram_ssd_dir"),
        engram_prefetch=raw.get("engram_prefetch"),
        engram_hot_cache_gb=raw.get("engram_hot_cache_gb"),
        engram_ram_cache_gb=raw.get("engram_ram_cache_gb"),
        extra_args=_parse_args(raw.get("extra_args", []), where, MANAGED_WORKER_FLAGS),
    )
    _check_engram_options(group, where, warnings)
    return group


def _check_gpus(where: str, gpus: float, tp: int) -> None:
    if not gpus > 0:
        raise ClusterSpecError(f"{where}: gpus_per_worker must be positive, not {gpus}")
    if gpus < 1:
        # Ray hands out fractions of a GPU: several small servers can share one device.
        if tp != 1:
            raise ClusterSpecError(
                f"{where}: gpus_per_worker {gpus} shares a GPU, which only works with "
                f"tp_size 1 (tp_size is {tp})"
            )
        return
    if gpus != math.floor(gpus):
        raise ClusterSpecError(
            f"{where}: gpus_per_worker {gpus} must be a whole number (or below 1 to share a GPU)"
        )
    if gpus < tp:
        raise ClusterSpecError(
            f"{where}: gpus_per_worker {gpus:g} is less than tp_size {tp}; a TP-{tp} server "
            f"needs at least {tp} GPUs"
        )
    if gpus % tp:
        raise ClusterSpecError(
            f"{where}: gpus_per_worker {gpus:g} is not a multiple of tp_size {tp}"
        )


def _check_engram_options(group: WorkerGroup, where: str, warnings: list[str]) -> None:
    offload = group.engram_offload
    if offload == "ssd" and not group.engram_ssd_dir:
        raise ClusterSpecError(f"{where}: engram_offload ssd needs engram_ssd_dir")
    for value, key in (
        (group.engram_hot_cache_gb, "engram_hot_cache_gb"),
        (group.engram_ram_cache_gb, "engram_ram_cache_gb"),
    ):
        if value is not None and value < 0:
            raise ClusterSpecError(f"{where}: {key} must be zero or more, not {value}")
    unused = []
    if group.engram_ssd_dir and offload != "ssd":
        unused.append("engram_ssd_dir (only ssd)")
    if group.engram_ram_cache_gb is not None and offload != "ssd":
        unused.append("engram_ram_cache_gb (only ssd)")
    if group.engram_hot_cache_gb and offload not in ("dram", "ssd"):
        unused.append("engram_hot_cache_gb (only dram or ssd)")
    if group.engram_prefetch is not None and offload == "off":
        unused.append("engram_prefetch")
    if unused:
        warnings.append(f"{where}: engram_offload {offload} ignores {', '.join(unused)}")
    if group.role == "prefill" and offload == "off":
        warnings.append(
            f"{where}: engram_offload off on a prefill worker: prompts are processed "
            "without the Engram tables, so outputs differ from the full model; prefill "
            "workers normally keep Engram (hbm, dram or ssd)"
        )


def _parse_router(raw: Any) -> RouterSpec:
    if not isinstance(raw, dict):
        raise ClusterSpecError(
            "router: must be a mapping (port, policy, prometheus_port, extra_args)"
        )
    _check_keys(raw, _ROUTER_KEYS, "router")
    policy = raw.get("policy", RouterSpec.policy)
    if policy not in ROUTER_POLICIES:
        raise ClusterSpecError(
            f"router: policy {policy!r} is not one of {', '.join(ROUTER_POLICIES)}"
        )
    return RouterSpec(
        port=raw.get("port", RouterSpec.port),
        policy=policy,
        prometheus_port=raw.get("prometheus_port", RouterSpec.prometheus_port),
        extra_args=_parse_args(raw.get("extra_args", []), "router", MANAGED_ROUTER_FLAGS),
    )


def _parse_restart(raw: Any) -> RestartPolicy:
    if not isinstance(raw, dict):
        raise ClusterSpecError(
            "restart: must be a mapping (max_restarts, backoff_s, max_backoff_s)"
        )
    _check_keys(raw, _RESTART_KEYS, "restart")
    policy = RestartPolicy(**raw)
    if policy.max_restarts < 0 or policy.backoff_s < 0 or policy.max_backoff_s < policy.backoff_s:
        raise ClusterSpecError(
            "restart: max_restarts and backoff_s must be zero or more and "
            f"max_backoff_s at least backoff_s (got {raw})"
        )
    return policy


def _parse_args(raw: Any, where: str, managed: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(a, (str, int, float)) for a in raw):
        raise ClusterSpecError(f"{where}: extra_args must be a list of strings")
    args = tuple(str(a) for a in raw)
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in managed:
            raise ClusterSpecError(
                f"{where}: extra_args sets {flag}, which the launcher sets from the spec"
            )
    return args


def _check_keys(raw: dict[str, Any], allowed: dict[str, Any], where: str) -> None:
    for key, value in raw.items():
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ClusterSpecError(
                f"{where}: unknown key '{key}'{hint}; allowed keys: {', '.join(allowed)}"
            )
        expected = allowed[key]
        # NOTE: bool is an int in Python; a `true` where a number belongs is a mistake.
        wrong_bool = isinstance(value, bool) and expected is not bool
        if wrong_bool or not isinstance(value, expected):
            kind = _KINDS.get(expected, "number")
            raise ClusterSpecError(f"{where}: '{key}' must be a {kind}, not {value!r}")


def _check_ports(spec: ClusterSpec) -> None:
    n_prefill = sum(g.count for g in spec.groups if g.role == "prefill")
    worker_ports = range(spec.base_port, spec.base_port + spec.num_workers)
    bootstrap_ports = range(spec.bootstrap_base_port, spec.bootstrap_base_port + n_prefill)
    ranges = {
        "worker ports": worker_ports,
        "bootstrap ports": bootstrap_ports,
        "router port": range(spec.router.port, spec.router.port + 1),
        "router prometheus_port": range(
            spec.router.prometheus_port, spec.router.prometheus_port + 1
        ),
    }
    for label, ports in ranges.items():
        if ports.start < 1 or ports.stop - 1 > 65535:
            raise ClusterSpecError(f"spec: {label} {_span(ports)} fall outside 1-65535")
    items = list(ranges.items())
    for i, (a, ra) in enumerate(items):
        for b, rb in items[i + 1 :]:
            if ra.start < rb.stop and rb.start < ra.stop:
                raise ClusterSpecError(
                    f"spec: {a} {_span(ra)} overlap {b} {_span(rb)}; change base_port, "
                    "bootstrap_base_port or the router's ports"
                )


def _span(ports: range) -> str:
    return str(ports.start) if len(ports) == 1 else f"{ports.start}-{ports.stop - 1}"
