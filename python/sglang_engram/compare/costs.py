"""$ per device-hour per SKU (shipped ``costs.yaml``, overridable) and tokens per dollar.

A deployment's hourly price is ``num_devices * price[sku]`` plus, when
``usd_per_dram_gib_hour`` is set, the host DRAM its Engram tables hold: so a placement
that frees RAM (ssd) can be credited for it. GPUs are priced per GPU-hour
(``usd_per_gpu_hour``); a CPU point's device is the whole host, priced per host-hour
(``usd_per_cpu_hour``) only when a ``--costs`` file gives one: nothing is shipped for
CPUs, and a CPU without a price has no tokens per dollar.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engram.files import GIB
from sglang_engram.spec_files.yaml_file import read_mapping

SHIPPED = Path(__file__).with_name("costs.yaml")
KEYS = {"usd_per_gpu_hour", "usd_per_cpu_hour", "usd_per_dram_gib_hour", "source", "date"}


class CostError(ValueError):
    pass


@dataclass(frozen=True)
class Costs:
    usd_per_gpu_hour: dict[str, float]
    usd_per_cpu_hour: dict[str, float]
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

    def device_hour(self, device: str, sku: str) -> float | None:
        """$ per device-hour: a GPU's (an unknown SKU is an error), or a CPU host's
        (``None`` when no ``--costs`` file prices it)."""
        if device == "cpu":
            return self.usd_per_cpu_hour.get(sku)
        return self.gpu_hour(sku)

    def deployment_hour(
        self, device: str, sku: str, num_devices: int, dram_bytes: float
    ) -> float | None:
        price = self.device_hour(device, sku)
        if price is None:
            return None
        return num_devices * price + dram_bytes / GIB * self.usd_per_dram_gib_hour


def load_costs(override: str | Path | None = None) -> Costs:
    base = read_mapping(SHIPPED, CostError, "a mapping with usd_per_gpu_hour")
    files = [str(SHIPPED)]
    prices = {str(k): float(v) for k, v in base["usd_per_gpu_hour"].items()}
    cpu = {str(k): float(v) for k, v in (base.get("usd_per_cpu_hour") or {}).items()}
    dram = float(base.get("usd_per_dram_gib_hour", 0.0))
    source, date = str(base.get("source", "")).strip(), str(base.get("date", ""))
    if override is not None:
        extra = read_mapping(override, CostError, "a mapping with usd_per_gpu_hour")
        unknown = set(extra) - KEYS
        if unknown:
            raise CostError(f"{override}: unknown keys {sorted(unknown)}")
        try:
            prices.update({str(k): float(v) for k, v in extra.get("usd_per_gpu_hour", {}).items()})
            cpu.update({str(k): float(v) for k, v in extra.get("usd_per_cpu_hour", {}).items()})
            dram = float(extra.get("usd_per_dram_gib_hour", dram))
        except (TypeError, ValueError, AttributeError) as exc:
            raise CostError(f"{override}: prices must be numbers ({exc})") from None
        source = str(extra.get("source", f"{source}; overridden by {override}")).strip()
        date = str(extra.get("date", date))
        files.append(str(override))
    bad = [k for k, v in {**prices, **cpu}.items() if v <= 0]
    if bad or dram < 0:
        raise CostError(f"prices must be positive (check {', '.join(bad) or 'dram'})")
    return Costs(prices, cpu, dram, source, date, tuple(files))
