"""What the cluster does about a component that dies or hangs, in one place.

``RestartPolicy`` (the spec's ``restart:``) is our supervisor's: when a process is
replaced and how often. ``Timeouts`` (the spec's ``timeouts:``) are SGLang's and the
router's own settings, set for every worker (environment) and the router (flags): how
soon a request that lost its peer fails instead of waiting. README "When a worker dies"
says which setting covers which fault.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class StrictModel(BaseModel):
    # NOTE: strict: a `true` where a number belongs, or "2" for 2, is a mistake.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RestartPolicy(StrictModel):
    """A process is replaced when it exits; when its health URL has not answered for
    ``hang_timeout_s`` after having answered (hung: it is SIGKILLed first); and when it
    has not answered ``start_timeout_s`` after its start (stuck starting). The n-th
    restart in a row waits ``backoff_s * 2**(n-1)``, at most ``max_backoff_s``; after
    ``max_restarts`` in a row it is given up (``failed``). A process that has answered
    its health check for ``reset_after_s`` without a miss begins a new row."""

    max_restarts: int = Field(3, ge=0)
    backoff_s: float = Field(2.0, ge=0)
    max_backoff_s: float = 60.0
    reset_after_s: float = Field(300.0, gt=0)
    probe_timeout_s: float = Field(3.0, gt=0)
    hang_timeout_s: float = Field(10.0, gt=0)
    start_timeout_s: float = Field(1800.0, gt=0)

    @model_validator(mode="after")
    def check_bounds(self) -> RestartPolicy:
        if self.max_backoff_s < self.backoff_s:
            raise ValueError("max_backoff_s must be at least backoff_s")
        if self.hang_timeout_s < self.probe_timeout_s:
            raise ValueError(
                "hang_timeout_s must be at least probe_timeout_s (one slow answer is not a hang)"
            )
        return self

    def delay(self, restart: int) -> float:
        return min(self.backoff_s * 2 ** (restart - 1), self.max_backoff_s)

    def hung(self, age_s: float, silent_s: float | None) -> str | None:
        """Why a live process counts as hung (its age, and how long since its health last
        answered: None if it never did), or None."""
        if silent_s is None and age_s > self.start_timeout_s:
            return f"no health answer {age_s:.0f}s after its start (start_timeout_s)"
        if silent_s is not None and silent_s > self.hang_timeout_s:
            return f"no health answer for {silent_s:.0f}s (hang_timeout_s)"
        return None


class Timeouts(StrictModel):
    """SGLang's PD timeouts and the router's health checks (SGLang's and the router's
    defaults in brackets): each ends a wait on a peer that is gone."""

    # Prefill: a request whose decode worker never sent its KV destination fails (300).
    kv_bootstrap_s: int = Field(30, ge=1)
    # Decode: a request whose prefill never delivered its KV, after bootstrapping, fails (300).
    kv_transfer_s: int = Field(60, ge=1)
    # Decode: checks each prefill's bootstrap server this often (5; SGLang's minimum is 2) ...
    prefill_heartbeat_s: float = Field(2.0, ge=2)
    # ... and fails the requests waiting on a prefill after this many misses in a row (2).
    prefill_heartbeat_failures: int = Field(2, ge=1)
    # Router: health-checks every worker this often (60); a worker it cannot reach
    # (a partitioned node, whose own supervisor still sees it healthy) is skipped.
    router_health_check_s: int = Field(10, ge=1)

    @property
    def worker_env(self) -> dict[str, str]:
        """The environment every SGLang worker gets (each reads the ones of its role)."""
        return {
            "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": str(self.kv_bootstrap_s),
            "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": str(self.kv_transfer_s),
            "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": f"{self.prefill_heartbeat_s:g}",
            "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": str(self.prefill_heartbeat_failures),
        }

    @property
    def router_args(self) -> list[str]:
        return ["--health-check-interval-secs", str(self.router_health_check_s)]
