"""Faults under load for the Ray cluster tests, with the soak's own pieces
(``engram_testing.soak``: ``load``, ``faults``): streaming requests at a fixed
concurrency while a component is SIGKILLed or SIGSTOPped, until the supervisor has
brought it back and a request sent after that has completed; then what every request
saw, checked against the bound and the reference model."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from engram_testing.reference import agreement
from engram_testing.soak.faults import ClusterView, Fault, strike, update_back
from engram_testing.soak.load import LoadDriver, Outcome, Workload

BOUND_S = 30.0  # README "When a worker dies": the longest any request waits
CONCURRENCY = 3
# The supervisor probes once a second, each probe waiting up to probe_timeout_s (3 s):
# a stopped process is SIGKILLed at most this long after hang_timeout_s (10 s).
DETECT_S = 10 + 3 + 1 + 2
REFUSED_AT_ONCE_S = 2.0


@dataclass
class FaultRun:
    faults: list[Fault]
    outcomes: list[Outcome]

    def sent_after(self, t: float) -> list[Outcome]:
        return [o for o in self.outcomes if o.sent >= t]


def workload(vocab: int) -> Workload:
    return Workload((), vocab, (8, 40), (12, 28))


def under_load(
    router: str, view: ClusterView, vocab: int, act, restore_s: float, key: str | None = None
) -> FaultRun:
    """Load on ``router`` (with the client ``key``); ``act(view)`` (returns the faults it
    struck) once requests complete; then load until every fault is back and a request sent
    after that has completed."""
    seed = random.randrange(1 << 30)
    load = LoadDriver(router, workload(vocab), CONCURRENCY, 4 * BOUND_S, seed, key)
    load.start()
    try:
        _until(lambda: sum(o.ok for o in load.snapshot()) >= CONCURRENCY, 120, "warm-up answers")
        faults = act(view)
        deadline = time.monotonic() + restore_s
        while any(f.back_at is None for f in faults):
            assert time.monotonic() < deadline, f"not restored in {restore_s}s: {faults}"
            update_back(view, faults)
            time.sleep(1)
        back = max(f.back_at for f in faults)
        _until(lambda: any(o.ok and o.sent > back for o in load.snapshot()), 120, "service")
    finally:
        load.stop(4 * BOUND_S + 10)
    run = FaultRun(faults, sorted(load.snapshot(), key=lambda o: o.sent))
    for f in faults:
        f.serving_at = min((o.ended for o in run.sent_after(f.at) if o.ok), default=None)
    return run


def strike_now(view: ClusterView, kind: str) -> Fault:
    fault = strike(view, kind, random.Random())
    assert fault is not None, f"nothing ready to strike for {kind}"
    return fault


def check(run: FaultRun, reference, regime: str, *, detect_s: float) -> str:  # noqa: ANN001
    """Every request answered or failed within the bound, with a cause; requests sent
    while a component was known down refused at once; completed answers right. Returns
    a line of figures for the test's output."""
    longest = max(run.outcomes, key=lambda o: o.waited_s)
    assert longest.waited_s <= BOUND_S, f"waited {longest.waited_s:.1f}s: {longest}"
    first = min(f.at for f in run.faults)
    hit = [o for o in run.outcomes if o.sent <= first < o.ended]
    assert hit, "no request was in flight when the fault struck"
    # Known down: after the detection, before it was back; such requests fail at once.
    down = [
        o
        for f in run.faults
        for o in run.sent_after(f.at + detect_s)
        if o.sent < f.back_at and not o.ok
    ]
    slow = [o for o in down if o.waited_s > REFUSED_AT_ONCE_S]
    assert not slow, f"refused slowly while down: {[(o.cause, o.waited_s) for o in slow]}"
    wrong = [
        o
        for o in run.outcomes
        if o.ok and not agreement(reference, list(o.prompt), list(o.output_ids), regime).all_agree
    ]
    assert not wrong, f"{len(wrong)} completed answers disagree with the reference"
    causes = sorted({o.cause for o in run.outcomes if not o.ok})
    return (
        f"{'+'.join(f.kind for f in run.faults)}: {len(run.outcomes)} requests, "
        f"{sum(o.ok for o in run.outcomes)} completed (checked), in flight {len(hit)} "
        f"(longest wait {max(o.waited_s for o in hit):.1f}s), causes {causes}, back after "
        f"{[round(f.back_s or -1, 1) for f in run.faults]}s, serving again after "
        f"{[round(f.serving_s or -1, 1) for f in run.faults]}s"
    )


def _until(cond, timeout_s: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
