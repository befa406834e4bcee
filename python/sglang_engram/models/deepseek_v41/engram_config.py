"""What SGLang's Engram path can serve of an ``engram_*`` config (DeepSeek-V4.1 and the
tiny model, whose Engram layer is the same V4.1 layer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engram.errors import EngramConfigError
from engram.spec import EngramSpec
from sglang_engram.protocol.family import HfConfig

if TYPE_CHECKING:
    from sglang_engram.protocol.server_config import EngramServerConfig


def check_servable(hf_config: HfConfig, config: EngramServerConfig) -> None:
    """Raise :class:`EngramConfigError` naming the field: an inconsistent config; with
    Engram on, a layout SGLang's hash kernel (CUDA) cannot run (N and the head count
    must be powers of two) or another layer than the V4.1 one."""
    try:
        spec = EngramSpec.from_hf_config(dict(hf_config))
    except EngramConfigError as exc:
        raise EngramConfigError(f"the model's Engram config is inconsistent: {exc}") from exc
    if not config.enabled:
        return
    for flag, value in (
        ("engram_max_ngram_size", spec.max_ngram_size),
        ("engram_n_heads", spec.n_heads),
    ):
        if value & (value - 1):
            raise EngramConfigError(
                f"the model's {flag} is {value}: SGLang's Engram hash kernel needs a power "
                "of two; rebuild the model (python -m engram.model build) with 2, 4 or 8, "
                "or pass --engram-offload off"
            )
    variant = hf_config.get("engram_variant", "v41")
    if variant != "v41":
        raise EngramConfigError(
            f"the model's engram_variant is {variant!r}: SGLang serves the V4.1 Engram "
            "layer only (the core library runs the others: python -m engram.model generate)"
        )
