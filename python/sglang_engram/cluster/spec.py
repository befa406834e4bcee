"""The cluster spec: the model, the transfer backend, the router and groups of prefill /
decode workers, read from YAML and checked by one pydantic schema.

Every mistake ends as one line naming the file and the field; questionable but legal
choices (Engram off on a prefill worker, the fake transfer backend) become ``warnings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from sglang_engram.args.flags import ENGRAM_FLAGS
from sglang_engram.cluster.recovery import RestartPolicy, StrictModel, Timeouts
from sglang_engram.spec_files.engram_keys import engram_keys
from sglang_engram.spec_files.schema_errors import first_error
from sglang_engram.spec_files.yaml_file import read_mapping

NAME = r"^[a-z0-9][a-z0-9-]*$"
WORKER_FIELD = "{worker}"  # in engram_profile_out: the worker's name
Device = Literal["gpu", "cpu"]
# Flags the launcher sets itself; extra_args may not set them.
MANAGED_WORKER_FLAGS = (
    *("--model-path", "--model", "--host", "--port", "--tp-size", "--tensor-parallel-size"),
    "--device",
    *("--disaggregation-mode", "--disaggregation-transfer-backend"),
    *("--disaggregation-bootstrap-port", *ENGRAM_FLAGS),
    *("--api-key", "--admin-api-key", "--config"),  # the cluster's keys (keys.py)
)
MANAGED_ROUTER_FLAGS = (
    *("--host", "--port", "--pd-disaggregation", "--prefill", "--decode"),
    *("--worker-urls", "--policy", "--prometheus-port", "--health-check-interval-secs"),
    "--disable-circuit-breaker",
    *("--api-key", "--control-plane-api-keys", "--config"),
)
# Ray's own resources; a pin names custom ones (`ray start --resources`).
RAY_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


class ClusterError(Exception):
    """Anything the cluster CLI reports as one ``error:`` line."""


class ClusterSpecError(ClusterError, ValueError):
    """The spec file is missing, malformed or asks for something impossible."""


def _extra_args(raw: Any, managed: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(raw, list | tuple) or not all(
        isinstance(a, str | int | float) and not isinstance(a, bool) for a in raw
    ):
        raise ValueError("must be a list of strings")
    args = tuple(str(a) for a in raw)
    for flag in (a.split("=", 1)[0] for a in args):
        if flag in managed:
            raise ValueError(f"sets {flag}, which the launcher sets from the spec")
    return args


class RouterSpec(StrictModel):
    port: int = 8000
    policy: Literal["random", "round_robin", "cache_aware", "power_of_two"] = "cache_aware"
    prometheus_port: int = 29000
    # NOTE: off by default: the router counts a failed PD request against both of its
    # workers, so a dead decode worker opens the healthy prefill's circuit (every request
    # then answers "No available prefill workers") and keeps it open for its timeout
    # (60 s) after the decode worker is back. The supervisor deregisters a dead worker.
    circuit_breaker: bool = False
    # The key clients send (`Authorization: Bearer KEY`): this file's first line; without
    # it, `up` makes the cluster a client key of its own (keys.py).
    api_key_file: str | None = None
    extra_args: tuple[str, ...] = ()

    @field_validator("extra_args", mode="before")
    @classmethod
    def check_extra_args(cls, raw: Any) -> tuple[str, ...]:
        return _extra_args(raw, MANAGED_ROUTER_FLAGS)

    @field_validator("api_key_file")
    @classmethod
    def absolute_key_file(cls, path: str | None) -> str | None:
        return None if path is None else str(Path(path).expanduser().resolve())


class WorkerGroup(engram_keys(StrictModel, "WorkerEngramKeys")):  # type: ignore[misc]
    """``count`` identical SGLang servers of one role; its ``engram_*`` keys are the
    declared server options (``spec_files/engram_keys.py``)."""

    role: Literal["prefill", "decode"]
    name: str = Field("", pattern=r"^$|" + NAME)  # default: the role
    count: int = Field(1, ge=1)
    tp_size: int = Field(1, ge=1)
    gpus_per_worker: float = Field(0, gt=0)  # default: tp_size
    # NOTE: each worker writes its own served profile (engram_profile_out): WORKER_FIELD
    # in the path becomes the worker's name (build_plan), needed when the group has more
    # than one worker.
    # Pins: the group's workers run only on Ray nodes with every one of these labels
    # (`ray start --labels k=v`) and these custom resources (`ray start --resources`),
    # of which each worker takes the amount given.
    node_labels: dict[str, str] = {}
    node_resources: dict[str, float] = {}
    extra_args: tuple[str, ...] = ()

    @field_validator("extra_args", mode="before")
    @classmethod
    def check_extra_args(cls, raw: Any) -> tuple[str, ...]:
        return _extra_args(raw, MANAGED_WORKER_FLAGS)

    @field_validator("node_resources")
    @classmethod
    def check_node_resources(cls, resources: dict[str, float]) -> dict[str, float]:
        for name, amount in resources.items():
            if name in RAY_RESOURCES:
                raise ValueError(f"{name} is Ray's own resource; pin by a custom one")
            if amount <= 0:
                raise ValueError(f"{name}: {amount:g} must be above 0")
        return resources

    @model_validator(mode="before")
    @classmethod
    def fill_defaults(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        return {"name": raw.get("role", ""), "gpus_per_worker": raw.get("tp_size", 1), **raw}

    @model_validator(mode="after")
    def check_group(self) -> WorkerGroup:
        gpus, tp = self.gpus_per_worker, self.tp_size
        problem = None
        if gpus < 1 and tp != 1:
            problem = f"shares a GPU, which only works with tp_size 1 (tp_size is {tp})"
        elif gpus >= 1 and gpus != int(gpus):
            problem = "must be a whole number (or below 1 to share a GPU)"
        elif gpus >= 1 and gpus < tp:
            problem = f"is less than tp_size {tp}; a TP-{tp} server needs at least {tp} GPUs"
        elif gpus >= 1 and gpus % tp:
            problem = f"is not a multiple of tp_size {tp}"
        if problem:
            raise ValueError(f"gpus_per_worker {gpus:g} {problem}")
        out = self.engram_profile_out
        if out and self.count > 1 and WORKER_FIELD not in out:
            raise ValueError(
                f"engram_profile_out {out}: the group's {self.count} workers would write one "
                f"file; put {WORKER_FIELD} in the path (it becomes each worker's name)"
            )
        return self

    @property
    def pins(self) -> str:
        """The pins in words ("" when unpinned)."""
        labels = [f"{k}={v}" for k, v in self.node_labels.items()]
        resources = [f"{k}: {v:g}" for k, v in self.node_resources.items()]
        return " and ".join(
            f"{what} {', '.join(items)}"
            for what, items in (("labels", labels), ("resources", resources))
            if items
        )

    @property
    def worker_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]

    def warnings(self, where: str) -> list[str]:
        return [f"{where}: {warning}" for warning in self.engram_warnings(self.role)]


class ClusterSpec(StrictModel):
    name: str = Field(pattern=NAME)
    model: str
    # gpu: each worker holds gpus_per_worker GPUs; cpu: SGLang's CPU engine, no GPUs.
    device: Device = "gpu"
    # NOTE: SGLang 0.5.23's names; mooncake_tcp is mooncake without RDMA.
    transfer_backend: Literal["mooncake", "mooncake_tcp", "nixl", "fake"]
    workers: tuple[WorkerGroup, ...] = Field(min_length=1, strict=False)  # YAML gives a list
    router: RouterSpec = RouterSpec()
    base_port: int = 30000
    bootstrap_base_port: int = 8998
    restart: RestartPolicy = RestartPolicy()
    timeouts: Timeouts = Timeouts()
    log_dir: str | None = None

    @field_validator("model")
    @classmethod
    def absolute_model_path(cls, model: str) -> str:
        # NOTE: the workers do not run in this directory (Ray starts them elsewhere): a
        # relative path that exists here is made absolute; anything else (a hub id, a
        # path on the worker nodes only) is passed on as written.
        path = Path(model).expanduser()
        return str(path.resolve()) if not path.is_absolute() and path.exists() else model

    @model_validator(mode="before")
    @classmethod
    def check_cpu_groups(cls, raw: Any) -> Any:
        # NOTE: on the raw groups, where a gpus_per_worker the user wrote can be told
        # from the default that WorkerGroup fills in.
        if isinstance(raw, dict) and raw.get("device") == "cpu":
            for i, group in enumerate(raw.get("workers") or []):
                if isinstance(group, dict) and "gpus_per_worker" in group:
                    raise ValueError(
                        f"workers[{i}].gpus_per_worker: device cpu runs workers without "
                        "GPUs; remove gpus_per_worker (or set device: gpu)"
                    )
        return raw

    @model_validator(mode="after")
    def check_cluster(self) -> ClusterSpec:
        names = [g.name for g in self.workers]
        for n in names:
            if names.count(n) > 1:
                raise ValueError(f"two worker groups are named {n!r}; give each a distinct 'name'")
        for role in ("prefill", "decode"):
            if role not in {g.role for g in self.workers}:
                raise ValueError(f"no {role} worker group; PD needs a prefill and a decode group")
        n_prefill = sum(g.count for g in self.workers if g.role == "prefill")
        ranges = [
            (
                "worker ports",
                range(self.base_port, self.base_port + sum(g.count for g in self.workers)),
            ),
            (
                "bootstrap ports",
                range(self.bootstrap_base_port, self.bootstrap_base_port + n_prefill),
            ),
            ("router port", range(self.router.port, self.router.port + 1)),
            (
                "router prometheus_port",
                range(self.router.prometheus_port, self.router.prometheus_port + 1),
            ),
        ]
        for i, (a, ra) in enumerate(ranges):
            if ra.start < 1 or ra.stop - 1 > 65535:
                raise ValueError(f"{a} must lie in 1-65535, not {_span(ra)}")
            for b, rb in ranges[i + 1 :]:
                if ra.start < rb.stop and rb.start < ra.stop:
                    raise ValueError(
                        f"{a} {_span(ra)} overlap {b} {_span(rb)}; change "
                        "base_port, bootstrap_base_port or the router's ports"
                    )
        return self

    @property
    def namespace(self) -> str:
        """The Ray namespace every actor of this cluster lives in."""
        return f"sglang-engram-{self.name}"

    @property
    def warnings(self) -> list[str]:
        out = [w for i, g in enumerate(self.workers) for w in g.warnings(f"workers[{i}]")]
        if self.transfer_backend == "fake":
            out.append("transfer_backend fake moves no KV cache; it is for tests only")
        if self.device == "cpu" and self.transfer_backend in ("mooncake", "nixl"):
            out.append(
                f"device cpu with transfer_backend {self.transfer_backend}: mooncake_tcp is "
                "the backend known to move KV on SGLang's CPU engine"
            )
        return out


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and check a spec file; the name defaults to the file's stem."""
    path = Path(path)
    data = read_mapping(path, ClusterSpecError, "a cluster spec: a mapping of keys to values")
    return parse_spec(data, where=str(path), default_name=path.stem)


def parse_spec(
    data: dict[str, Any], *, where: str = "spec", default_name: str = "cluster"
) -> ClusterSpec:
    try:
        return ClusterSpec.model_validate({"name": default_name.lower().replace("_", "-"), **data})
    except ValidationError as exc:
        raise ClusterSpecError(f"{where}: {_one_line(exc)}") from None


_MESSAGES = {
    "string_pattern_mismatch": "must use lowercase letters, digits and '-'",
    "too_short": "must not be empty",
    "tuple_type": "must be a list",
}


def _one_line(exc: ValidationError) -> str:
    """The first error as ``field: what is wrong``, e.g. ``workers[1].count: ...``."""
    where, msg, more = first_error(exc, ClusterSpec, _MESSAGES)
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where).lstrip(".")
    msg += f" (and {more} more)" if more else ""
    return f"{loc}: {msg}" if loc else msg


def _span(ports: range) -> str:
    return str(ports.start) if len(ports) == 1 else f"{ports.start}-{ports.stop - 1}"
