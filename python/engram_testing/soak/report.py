"""The soak's figures: requests by outcome and cause, waits against the bound, time to
restore per fault kind, answers checked against the reference model, resource growth;
the table it prints and the summary behind its last line of JSON."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from engram.placements import placement_named
from engram_testing.soak.faults import Fault, targets
from engram_testing.soak.load import Outcome

REFUSED_AT_ONCE_S = 1.0
# Failures of a request the cluster had accepted (its 200 stream began): a fault hit it in
# flight, which the bound covers; the rest (an HTTP error, no connection) are refusals.
IN_FLIGHT_CAUSES = ("stream cut short", "error event", "short answer", "aborted")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _stats(values: list[float]) -> dict[str, float | None]:
    return {
        "n": len(values),
        "median": statistics.median(values) if values else None,
        "max": max(values) if values else None,
    }


def regime_of(prefill_offload: str, decode_offload: str) -> str:
    """The reference regime a PD pairing serves: Engram where each side has it."""
    pre, dec = (placement_named(p).holds_table for p in (prefill_offload, decode_offload))
    return {(1, 1): "both", (1, 0): "prefill_only", (0, 1): "decode_only"}.get((pre, dec), "none")


def slow_refusals(
    outcomes: list[Outcome], faults: list[Fault], detect_s: dict[str, float]
) -> list[Outcome]:
    """Refused requests (not ``IN_FLIGHT_CAUSES``) that waited more than
    ``REFUSED_AT_ONCE_S`` although sent while a fault's component was known to be down:
    once its detection was over (``detect_s`` by signal: a stopped component is silent
    until the supervisor kills it) and the cluster's state showed it down, before it was
    back, and not within any fault's detection."""

    def window(f: Fault) -> tuple[float, float]:
        known = f.at + detect_s[f.kind.partition(":")[2]]
        return f.at, max(known, f.down_at or known)

    def detecting(o: Outcome) -> bool:
        return any(a <= o.sent < b for a, b in map(window, faults))

    def known_down(o: Outcome) -> bool:
        return any(window(f)[1] <= o.sent < (f.back_at or float("inf")) for f in faults)

    return [
        o
        for o in outcomes
        if not o.ok
        and not o.cause.startswith(IN_FLIGHT_CAUSES)
        and o.waited_s > REFUSED_AT_ONCE_S
        and known_down(o)
        and not detecting(o)
    ]


def summarize(
    outcomes: list[Outcome],
    faults: list[Fault],
    wrong: list[Outcome],
    growth: dict[str, dict],
    *,
    bound_s: float,
    duration_s: float,
    kinds: list[str],
    detect_s: dict[str, float],
    min_faults: int = 0,
) -> dict[str, Any]:
    ok = [o for o in outcomes if o.ok]
    failed = [o for o in outcomes if not o.ok]
    longest = max(outcomes, key=lambda o: o.waited_s, default=None)
    restored_after = {
        f.back_at for f in faults if f.back_at is not None and "prefill" in targets(f.kind)
    }
    first_back = min(restored_after, default=None)
    per_kind = {}
    for kind in kinds:
        mine = [f for f in faults if f.kind == kind]
        hit = [o for f in mine for o in outcomes if o.sent <= f.at < o.ended]
        per_kind[kind] = {
            "faults": len(mine),
            "not_restored": sum(f.back_at is None for f in mine),
            "back_s": _stats([f.back_s for f in mine if f.back_s is not None]),
            "serving_again_s": _stats([f.serving_s for f in mine if f.serving_s is not None]),
            "in_flight": len(hit),
            "in_flight_failed": sum(not o.ok for o in hit),
            "in_flight_longest_wait_s": max((o.waited_s for o in hit), default=None),
        }
    sent = len(outcomes)
    tokens = sum(len(o.output_ids) for o in ok)
    grew = sorted(s for s, g in growth.items() if g["grew"])
    slow = slow_refusals(outcomes, faults, detect_s)
    t0 = min((o.sent for o in outcomes), default=0.0)
    summary = {
        "duration_s": duration_s,
        "sent": sent,
        "completed": len(ok),
        "failed": len(failed),
        "wrong": len(wrong),
        "completed_ratio": len(ok) / sent if sent else None,
        "failed_by_cause": dict(Counter(o.cause for o in failed).most_common()),
        "refused_at_once": sum(o.waited_s < REFUSED_AT_ONCE_S for o in failed),
        "refused_slowly_while_down": len(slow),
        "slow_refusals": [
            {"sent_s": o.sent - t0, "waited_s": o.waited_s, "cause": o.cause} for o in slow[:20]
        ],
        "longest_wait_s": longest.waited_s if longest else None,
        "longest_wait_cause": (longest.cause or "completed") if longest else None,
        "bound_s": bound_s,
        "within_bound": longest is None or longest.waited_s <= bound_s,
        "completed_wait_s": {
            "p50": _pct([o.waited_s for o in ok], 0.5),
            "p99": _pct([o.waited_s for o in ok], 0.99),
        },
        "output_tok_s": tokens / duration_s if duration_s else None,
        "prefix_cache_hits": sum(o.cached_tokens > 0 for o in ok),
        "prefix_cache_hits_after_prefill_restart": sum(
            o.cached_tokens > 0 and first_back is not None and o.sent > first_back for o in ok
        ),
        "faults": per_kind,
        "faults_total": len(faults),
        "all_restored": all(f.back_at is not None for f in faults),
        "min_faults": min_faults,
        "every_kind_struck": all(k["faults"] >= min_faults for k in per_kind.values()),
        "grew": grew,
        "growth": growth,
    }
    summary["passed"] = (
        summary["wrong"] == 0
        and summary["within_bound"]
        and summary["all_restored"]
        and summary["every_kind_struck"]
        and summary["refused_slowly_while_down"] == 0
        and not grew
    )
    return summary


def render(summary: dict[str, Any]) -> str:
    s = summary
    ratio = "-" if s["completed_ratio"] is None else f"{s['completed_ratio']:.3f}"
    lines = [
        f"requests: {s['sent']} sent, {s['completed']} completed ({ratio} of sent), "
        f"{s['failed']} failed ({s['refused_at_once']} refused in < {REFUSED_AT_ONCE_S:g} s; "
        f"{s['refused_slowly_while_down']} slower while a component was known down), "
        f"{s['wrong']} wrong",
        f"longest wait {_f(s['longest_wait_s'])} s ({s['longest_wait_cause']}); bound "
        f"{s['bound_s']:g} s: {'met' if s['within_bound'] else 'EXCEEDED'}; completed p50 "
        f"{_f(s['completed_wait_s']['p50'])} s, p99 {_f(s['completed_wait_s']['p99'])} s",
        f"prefix-cache hits: {s['prefix_cache_hits']} "
        f"({s['prefix_cache_hits_after_prefill_restart']} after a prefill restart)",
        "",
        f"{'failed by cause':<48} {'n':>6}",
    ]
    lines += [f"{cause[:48]:<48} {n:>6}" for cause, n in s["failed_by_cause"].items()]
    lines += [
        "",
        f"{'fault':<14} {'n':>3} {'unrestored':>10} {'back med':>9} {'back max':>9} "
        f"{'serve med':>9} {'serve max':>9} {'in flight':>9} {'failed':>6} {'wait max':>8}",
    ]
    for kind, k in s["faults"].items():
        lines.append(
            f"{kind:<14} {k['faults']:>3} {k['not_restored']:>10} "
            f"{_f(k['back_s']['median']):>9} {_f(k['back_s']['max']):>9} "
            f"{_f(k['serving_again_s']['median']):>9} {_f(k['serving_again_s']['max']):>9} "
            f"{k['in_flight']:>9} {k['in_flight_failed']:>6} "
            f"{_f(k['in_flight_longest_wait_s']):>8}"
        )
    if not s["every_kind_struck"]:
        lines.append(f"fewer than {s['min_faults']} faults of some kind (--min-faults)")
    lines += ["", f"{'resource (after warm-up)':<34} {'first':>9} {'last':>9} grew"]
    for series, g in s["growth"].items():
        lines.append(
            f"{series:<34} {g['first']:>9.1f} {g['last']:>9.1f} {'YES' if g['grew'] else 'no'}"
        )
    lines.append(f"\n{'PASSED' if s['passed'] else 'FAILED'}")
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
