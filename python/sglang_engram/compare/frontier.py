"""Pareto maths on (interactivity, throughput) points, InferenceX's conventions.

A point is on its group's frontier when no point of the group has both a higher
interactivity and a higher throughput per device (per GPU; per host on a CPU). Values at a target interactivity are read along
the frontier by monotone (PCHIP) interpolation, ``None`` outside the measured range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from scipy.interpolate import PchipInterpolator


@dataclass(frozen=True)
class Point:
    interactivity: float  # tok/s/user at P90: 1000 / p90_tpot_ms
    tput_per_device: float  # total tok/s / every GPU of the deployment (CPU: every host)
    tokens_per_dollar: float | None  # None: no price for the hardware
    max_concurrency: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def beats(a: Point, b: Point, axis: str = "tput_per_device") -> bool:
    """``a`` is better than ``b`` on both axes (strictly); never on an unpriced axis."""
    ya, yb = getattr(a, axis), getattr(b, axis)
    return ya is not None and yb is not None and a.interactivity > b.interactivity and ya > yb


def frontier(points: Sequence[Point]) -> list[Point]:
    """The group's Pareto frontier, by increasing interactivity."""
    kept = [p for p in points if not any(beats(q, p) for q in points)]
    return sorted(kept, key=lambda p: (p.interactivity, -p.tput_per_device))


def value_at(front: Sequence[Point], x: float, axis: str) -> float | None:
    """``axis`` on the frontier at interactivity ``x`` (PCHIP), None outside its range
    or where the axis has no value (tokens per dollar of unpriced hardware)."""
    if any(getattr(p, axis) is None for p in front):
        return None
    xs: list[float] = []
    ys: list[float] = []
    for p in sorted(front, key=lambda p: p.interactivity):
        if xs and p.interactivity == xs[-1]:
            ys[-1] = max(ys[-1], getattr(p, axis))  # NOTE: PCHIP needs distinct x
        else:
            xs.append(p.interactivity)
            ys.append(getattr(p, axis))
    if not xs or not xs[0] <= x <= xs[-1]:
        return None
    if len(xs) == 1:
        return ys[0]
    value = float(PchipInterpolator(xs, ys, extrapolate=False)(x))
    return None if math.isnan(value) else value


def dominated_share(a: Sequence[Point], b: Sequence[Point], axis: str) -> float | None:
    """Share of ``a``'s points for which some point of ``b`` is better on both axes
    (None when either side has no value on ``axis``)."""
    if not a or any(getattr(p, axis) is None for p in [*a, *b]):
        return None
    return sum(any(beats(q, p, axis) for q in b) for p in a) / len(a)


def curve(front: Sequence[Point], axis: str, n: int = 120) -> tuple[list[float], list[float]]:
    """The interpolated frontier sampled at ``n`` interactivities (for charts)."""
    if len(front) < 2:
        return [p.interactivity for p in front], [getattr(p, axis) for p in front]
    lo, hi = front[0].interactivity, front[-1].interactivity
    xs = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
    pairs = [(x, value_at(front, x, axis)) for x in xs]
    return [x for x, y in pairs if y is not None], [y for _, y in pairs if y is not None]
