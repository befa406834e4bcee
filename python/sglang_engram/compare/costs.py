"""$ per GPU-hour per SKU (shipped ``costs.yaml``, overridable) and tokens per dollar.

A deployment's hourly price is ``num_gpus * usd_per_gpu_hour[sku]`` plus, when
``usd_per_dram_gib_hour`` is set, the host DRAM its Engram tables hold: so a placement
that frees RAM (ssd) can be credited for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engram.files import GIB
from sglang_engram.yaml_file import read_mapping

SHIPPED = Path(__file__).with_name("costs.yaml")


class CostError(ValueError):
    pass


@dataclass(frozen=True)
class Costs:
    usd_per_gpu_hour: dict[str, float]
    usd_per_dram_gib_hour: float
    source: str
    date: str
    files: tuple[str, ...]

    def gpu_hour(self, sku: str) -> float:
        if sku not in self.usd_per_gpu_hour:
            raise CostError(
                f"no $/GPU-hour for SKU {sku!r}: add it under usd_per_gpu_hour in a "
                f"--costs FILE (or in {SHIPPED})"
            )
        return self.usd_per_gpu_hour[sku]

    def deployment_hour(self, sku: str, num_gpus: int, dram_bytes: float) -> float:
        return num_gpus * self.gpu_hour(sku) + dram_bytes / GIB * self.usd_per_dram_gib_hour


def load_costs(override: str | Path | None = None) -> Costs:
    base = read_mapping(SHIPPED, CostError, "a mapping with usd_per_gpu_hour")
    files = [str(SHIPPED)]
    prices = {str(k): float(v) for k, v in base["usd_per_gpu_hour"].items()}
    dram = float(base.get("usd_per_dram_gib_hour", 0.0))
    source, date = str(base.get("source", "")).strip(), str(base.get("date", ""))
    if override is not None:
        extra = read_mapping(override, CostError, "a mapping with usd_per_gpu_hour")
        unknown = set(extra) - {"usd_per_gpu_hour", "usd_per_dram_gib_hour", "source", "date"}
        if unknown:
            raise CostError(f"{override}: unknown keys {sorted(unknown)}")
        try:
            prices.update({str(k): float(v) for k, v in extra.get("usd_per_gpu_hour", {}).items()})
            dram = float(extra.get("usd_per_dram_gib_hour", dram))
        except (TypeError, ValueError, AttributeError) as exc:
            raise CostError(f"{override}: prices must be numbers ({exc})") from None
        source = str(extra.get("source", f"{source}; overridden by {override}")).strip()
        date = str(extra.get("date", date))
        files.append(str(override))
    bad = [k for k, v in prices.items() if v <= 0]
    if bad or dram < 0:
        raise CostError(f"prices must be positive (check {', '.join(bad) or 'dram'})")
    return Costs(prices, dram, source, date, tuple(files))
