"""Quality tools for Engram models: what switching Engram off costs per phase
(:mod:`engram.eval.ablate`, ``--url`` for a running deployment: :mod:`engram.eval.remote`)
and which n-grams the gate relies on (:mod:`engram.eval.gate_scan`).

``python -m engram.eval ablate|gate-scan`` is the command line.
"""

from engram.eval.ablate import Ablation, RegimeScore, ablate
from engram.eval.gate_scan import GateScan, gate_scan
from engram.eval.regimes import REGIMES, Regime
from engram.eval.samples import Sample, SampleOptions, make_samples

__all__ = [
    "REGIMES",
    "Ablation",
    "GateScan",
    "Regime",
    "RegimeScore",
    "Sample",
    "SampleOptions",
    "ablate",
    "gate_scan",
    "make_samples",
]
