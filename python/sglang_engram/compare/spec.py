"""The sweep spec (YAML): what to deploy, which workload, which concurrencies.

    name: placements-tiny
    model: models/tiny-engram
    workload: {fixed: {input_len: 1024, output_len: 256}}
    concurrency: [1, 2, 4, 8]
    configs:
      - {name: dram, launch: {tp_size: 1, engram_offload: dram}}
      - {name: pd, cluster: pd-cluster.yaml}
      - {name: remote, url: "http://10.0.0.5:30000", num_gpus: 8, sku: H200, placement: dram}

``device: cpu`` (default ``gpu``) runs the sweep on SGLang's CPU engine: every ``launch``
config's server gets ``deployments.CPU_SERVER_ARGS`` and ``SGLANG_USE_CPU_ENGINE=1``, a
``cluster`` config's spec says ``device: cpu`` itself, and the hardware recorded is the
CPU (a url config then states no ``num_gpus``).

Every mistake is one :class:`SweepSpecError` line naming the key at fault.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sglang_engram.spec_files.engram_keys import engram_keys, placement_key
from sglang_engram.spec_files.schema_errors import first_error
from sglang_engram.spec_files.yaml_file import read_mapping

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class SweepSpecError(ValueError):
    """A sweep spec that cannot be used; the message names the key at fault."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FixedWorkload(_Strict):
    """Random token ids; each length drawn from [range_ratio * L, L] (InferenceX)."""

    input_len: int = Field(gt=0)
    output_len: int = Field(gt=1)
    range_ratio: float = Field(0.8, ge=0.0, le=1.0)


class MultiTurnWorkload(_Strict):
    """Agentic-style sessions: a shared system prefix, then one question per turn, the
    conversation so far resent each turn (SGLang's generated-shared-prefix with turns)."""

    system_prompt_len: int = Field(gt=0)
    question_len: int = Field(gt=0)
    output_len: int = Field(gt=1)
    turns: int = Field(2, ge=2)
    sessions_per_prefix: int = Field(4, gt=0)
    range_ratio: float = Field(0.8, ge=0.0, le=1.0)


class Workload(_Strict):
    fixed: FixedWorkload | None = None
    multi_turn: MultiTurnWorkload | None = Field(None, alias="multi-turn")

    @model_validator(mode="after")
    def _one(self) -> Workload:
        if (self.fixed is None) == (self.multi_turn is None):
            raise ValueError("give exactly one of 'fixed' or 'multi-turn'")
        return self

    @property
    def kind(self) -> str:
        return "fixed" if self.fixed is not None else "multi-turn"

    def describe(self) -> dict[str, Any]:
        body = self.fixed if self.fixed is not None else self.multi_turn
        assert body is not None
        return {"kind": self.kind, **body.model_dump()}


class LaunchArgs(engram_keys(_Strict, "LaunchEngramKeys")):  # type: ignore[misc]
    """One ``sglang.launch_server`` the sweep starts and stops; its ``engram_*`` keys are
    the declared server options (``spec_files/engram_keys.py``)."""

    tp_size: int = Field(1, gt=0)
    extra_args: list[str] = []
    startup_timeout_s: float = Field(1800.0, gt=0)


class ConfigSpec(_Strict):
    name: str = Field(pattern=NAME)
    launch: LaunchArgs | None = None
    # A cluster spec file (relative to the sweep spec) or the cluster spec itself.
    cluster: str | dict[str, Any] | None = None
    url: str | None = Field(None, pattern=r"^https?://")
    num_gpus: int | None = Field(None, gt=0)
    sku: str | None = None
    placement: str | None = None
    metrics_urls: list[str] = []

    _placement = field_validator("placement", mode="before")(lambda cls, v: placement_key(v))

    @model_validator(mode="after")
    def _kind(self) -> ConfigSpec:
        given = [k for k in ("launch", "cluster", "url") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of launch, cluster or url (got {given or 'none'})")
        if self.url is not None:
            _check_url(self.url)
        if self.url is not None and self.placement is None:
            raise ValueError("a url config states its placement (and sku if mixed)")
        if self.url is None and self.num_gpus is not None:
            raise ValueError("num_gpus is known for launch and cluster configs; drop it")
        return self

    @property
    def kind(self) -> str:
        return "launch" if self.launch else "cluster" if self.cluster is not None else "url"


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"url {url} has a port outside 1-65535") from None
    if not parts.hostname or port == 0:
        raise ValueError(f"url {url} needs a host and a port in 1-65535 (http://HOST:PORT)")


class SweepSpec(_Strict):
    name: str = Field(pattern=NAME)
    model: str
    tokenizer: str | None = None
    sku: str | None = None  # overrides detection for launch and cluster configs
    device: Literal["gpu", "cpu"] = "gpu"
    workload: Workload
    concurrency: list[int] = Field(min_length=1)
    prompts_per_concurrency: int = Field(10, gt=0)
    warmup_per_concurrency: int = Field(2, ge=0)
    seed: int = 1
    point_timeout_s: float = Field(3600.0, gt=0)
    configs: list[ConfigSpec] = Field(min_length=1)
    # Where relative cluster spec paths resolve (the spec file's folder); not a YAML key.
    base_dir: str = Field(".", exclude=True)

    @model_validator(mode="after")
    def _unique(self) -> SweepSpec:
        if any(c <= 0 for c in self.concurrency):
            raise ValueError("concurrency values must be positive")
        if len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError("concurrency has repeated values")
        names = [c.name for c in self.configs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"config names repeat: {', '.join(dupes)}")
        for c in self.configs:
            if c.url is not None and (c.num_gpus is None) == (self.device == "gpu"):
                why = (
                    "must state num_gpus"
                    if self.device == "gpu"
                    else ("of a cpu sweep states no num_gpus (its device is the host)")
                )
                raise ValueError(f"configs[{c.name}]: a url config {why}")
        return self

    @property
    def tokenizer_path(self) -> str:
        return self.tokenizer or self.model

    def num_prompts(self, concurrency: int) -> int:
        return self.prompts_per_concurrency * concurrency

    def warmup_requests(self, concurrency: int) -> int:
        return self.warmup_per_concurrency * concurrency


def load_sweep_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    data = read_mapping(
        path, SweepSpecError, "a sweep spec: a mapping (name, model, workload, ...)"
    )
    return parse_sweep_spec(data, base_dir=path.resolve().parent, source=str(path))


def parse_sweep_spec(
    data: dict[str, Any], *, base_dir: str | Path = ".", source: str = "spec"
) -> SweepSpec:
    try:
        return SweepSpec.model_validate({**data, "base_dir": str(base_dir)})
    except ValidationError as exc:
        loc, msg, more = first_error(exc, SweepSpec)
        where = _config_name(data, loc) or ".".join(str(p) for p in loc) or "(top level)"
        msg += f" (and {more} more)" if more else ""
        if not loc and msg.startswith("configs["):
            raise SweepSpecError(f"{source}: {msg}") from None  # names its config itself
        raise SweepSpecError(f"{source}: {where}: {msg}") from None


def _config_name(data: dict[str, Any], loc: tuple[Any, ...]) -> str | None:
    """'configs[dram].launch.tp_size' rather than 'configs.1.launch.tp_size'."""
    if len(loc) < 2 or loc[0] != "configs" or not isinstance(loc[1], int):
        return None
    try:
        name = data["configs"][loc[1]].get("name", loc[1])
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    rest = [str(p) for p in loc[2:] if p not in ("str", "dict[str,any]", "LaunchArgs")]
    return ".".join([f"configs[{name}]", *rest])
