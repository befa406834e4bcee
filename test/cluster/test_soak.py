"""``benchmark/soak_pd.py`` without a cluster: its command line (help with defaults, bad
input as one line and exit 2, nothing created), the growth check on samples, the
summary's figures on outcomes and faults drawn fresh. The soak against a real cluster is
the benchmark; test_cluster_ray.py runs its pieces under each kind of fault."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from engram_testing.soak.faults import DEFAULT_KINDS, Fault, check_kinds
from engram_testing.soak.load import Outcome
from engram_testing.soak.report import regime_of, render, summarize
from engram_testing.soak.resources import growth, shm_usage

REPO = Path(__file__).resolve().parents[2]

SOAK = REPO / "benchmark" / "soak_pd.py"


def _soak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SOAK), *args], capture_output=True, text=True, timeout=120
    )


def test_help_states_every_default():
    out = _soak("--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    for default in ("(default: 1200.0)", "(default: 4)", "(default: 30.0)", "(default: 32-256)"):
        assert default in text
    assert ",".join(DEFAULT_KINDS)[:40] in text.replace(" ", "")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--faults", "decode:kill,prefill:pause"], "'prefill:pause' is not a fault"),
        (["--duration", "-5"], "argument --duration: must be a number > 0"),
        (["--new-tokens", "64-16"], "argument --new-tokens: must be LO-HI"),
        (["--duration", "60", "--warmup", "60"], "--warmup must be shorter than --duration"),
        (["--spec", "no/such.yaml"], "argument --spec: no/such.yaml does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = _soak(*args, "--out", str(tmp_path / "out"))
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
    assert not (tmp_path / "out").exists()


def test_a_spec_without_its_model_is_refused_before_anything_starts(tmp_path):
    spec = tmp_path / "spec.yaml"
    example = (REPO / "examples" / "pd-cluster-cpu.yaml").read_text()
    spec.write_text(example.replace("models/tiny-engram", str(tmp_path / "no-model")))
    out = _soak("--spec", str(spec), "--out", str(tmp_path / "out"))
    assert out.returncode == 2 and "does not exist; build it with" in out.stderr, out.stderr
    assert not (tmp_path / "out").exists()


def test_fault_kinds_and_regimes():
    assert check_kinds(["workers:stop", "router:kill"]) == ["workers:stop", "router:kill"]
    with pytest.raises(ValueError, match="'router:term' is not a fault"):
        check_kinds(["router:term"])
    assert regime_of("dram", "off") == "prefill_only" and regime_of("hbm", "dram") == "both"
    assert regime_of("off", "off") == "none"


def test_growth_flags_only_what_outgrows_its_margin():
    rng = random.Random()
    base = rng.uniform(500, 2000)
    rows = []
    for i in range(30):
        rows.append(
            (
                float(i),
                {
                    # noise around a level, a restart's dip and warm-up: not growth
                    "decode-0 server rss_mib": base
                    + rng.uniform(-30, 30)
                    - (400 if i == 20 else 0),
                    # a leak: 8 MiB a sample, beyond 25 % of the level by the end
                    "router actor rss_mib": 100 + 8 * i,
                    "cluster ray_actors": 3.0 + (i >= 25),
                    "/dev/shm shm_mib": 40.0,
                },
            )
        )
    got = growth(rows, after=3.0)
    assert {s for s, g in got.items() if g["grew"]} == {
        "router actor rss_mib",
        "cluster ray_actors",
    }
    assert growth(rows, after=26.0) == {}  # too few samples to say
    assert min(shm_usage(Path("/dev/shm"))) >= 0


def test_summary_counts_causes_waits_and_restores():
    rng = random.Random()
    t0 = 1_000_000.0
    fault = Fault("decode:kill", at=t0 + 50, members={"decode-0": 4242}, back_at=t0 + 110)
    unrestored = Fault("router:stop", at=t0 + 200, members={"router": 77})
    outcomes = [
        Outcome((1, 2), 4, t0 + i, rng.uniform(0.5, 5), output_ids=(5, 6, 7, 8)) for i in range(40)
    ]
    outcomes.append(Outcome((1,), 4, t0 + 48, 3.0, cause="502 decode_server_error"))
    outcomes += [
        Outcome((1,), 4, t0 + 60 + i, 0.01, cause="503 server_selection_failed") for i in range(5)
    ]
    longest = rng.uniform(31, 60)
    outcomes.append(Outcome((1,), 4, t0 + 201, longest, cause="connection reset"))
    s = summarize(
        outcomes,
        [fault, unrestored],
        wrong=[],
        growth={},
        bound_s=30,
        duration_s=300,
        kinds=["decode:kill", "router:stop"],
        detect_s={"kill": 3.0, "stop": 15.0},
    )
    assert (s["sent"], s["completed"], s["failed"], s["wrong"]) == (47, 40, 7, 0)
    assert s["failed_by_cause"] == {
        "503 server_selection_failed": 5,
        "502 decode_server_error": 1,
        "connection reset": 1,
    }
    assert s["refused_at_once"] == 5 and s["longest_wait_s"] == longest
    # sent 1 s after the router stopped: still detecting, so a long wait is no slow refusal
    assert s["refused_slowly_while_down"] == 0

    def _later(outs: list[Outcome], faults: list[Fault]) -> dict:
        return summarize(
            outs,
            faults,
            wrong=[],
            growth={},
            bound_s=60,
            duration_s=300,
            kinds=["decode:kill"],
            detect_s={"kill": 3.0, "stop": 15.0},
        )

    # ... but one sent 10 s after the decode worker died (known down) that took 5 s is one
    slow = Outcome((1,), 4, t0 + 60, 5.0, cause="502 decode_server_error")
    again = _later([*outcomes, slow], [fault, unrestored])
    assert again["refused_slowly_while_down"] == 1 and not again["passed"]
    assert again["slow_refusals"] == [
        {"sent_s": 60.0, "waited_s": 5.0, "cause": "502 decode_server_error"}
    ]
    # the cluster showed the worker down only 12 s after it died: not yet known then
    late = Fault("decode:kill", at=t0 + 50, members={"decode-0": 4242}, back_at=t0 + 110)
    late.down_at = t0 + 62
    unknown = _later([*outcomes, slow], [late, unrestored])
    assert unknown["refused_slowly_while_down"] == 0
    # a request whose stream had begun when it was cut is no refusal, however long it took
    cut = Outcome((1,), 4, t0 + 60, 12.0, cause="stream cut short")
    in_flight = _later([*outcomes, cut], [fault, unrestored])
    assert in_flight["refused_slowly_while_down"] == 0
    assert not s["within_bound"] and not s["all_restored"] and not s["passed"]
    decode = s["faults"]["decode:kill"]
    assert decode["back_s"]["max"] == 60 and decode["in_flight_failed"] == 1
    assert s["faults"]["router:stop"]["not_restored"] == 1
    text = render(s)
    assert "EXCEEDED" in text and text.endswith("FAILED")


def test_a_soak_that_struck_a_kind_too_few_times_fails():
    rng = random.Random()
    t0 = 1_000_000.0
    n = rng.randint(2, 6)
    faults = [
        Fault(kind, at=t0 + 100 * i, members={"x": i}, back_at=t0 + 100 * i + 30)
        for i in range(n)
        for kind in ("decode:kill", "router:stop")
    ][:-1]  # one router:stop fewer
    outcomes = [Outcome((1, 2), 4, t0 + i, 0.5, output_ids=(5, 6)) for i in range(20)]
    common = dict(
        wrong=[],
        growth={},
        bound_s=30,
        duration_s=100.0 * n,
        kinds=["decode:kill", "router:stop"],
        detect_s={"kill": 3.0, "stop": 15.0},
    )
    met = summarize(outcomes, faults, min_faults=n - 1, **common)
    assert met["every_kind_struck"] and met["passed"]
    short = summarize(outcomes, faults, min_faults=n, **common)
    assert not short["every_kind_struck"] and not short["passed"]
    assert f"fewer than {n} faults of some kind" in render(short)


def test_the_plot_draws_every_panel_with_gaps_and_faults(tmp_path):
    from engram_testing.soak.resources import plot

    rng = random.Random()
    rows = [
        (60.0 * i, {"decode-0 server rss_mib": rng.uniform(3000, 4000)} if i % 3 else {})
        for i in range(12)
    ]
    for _, r in rows:
        r.update({"cluster processes": 20.0, "cluster ray_actors": 3.0, "/dev/shm files": 7.0})
    faults = [{"kind": "decode:stop", "at": 130.0}, {"kind": "router:kill", "at": 400.0}]
    outcomes = [(rng.uniform(0, 700), rng.uniform(0, 12), rng.random() < 0.5) for _ in range(50)]
    path = tmp_path / "soak.png"
    plot(rows, faults, outcomes, 0.0, path, "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
