"""benchmark/bench_gather.py without a GPU: one line and exit 2, and how it runs cases
in children (a stand-in child here: one that dies in a case, one that hangs)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmark" / "bench_gather.py"
CASES = ROOT / "benchmark" / "gather_cases.py"

FAKE_CHILD = """\
import json, os, sys, time
spec = json.loads(sys.argv[1])
for case in spec["cases"]:
    if case == spec["die_in"]:
        print("an illegal memory access was encountered (RuntimeError)", file=sys.stderr)
        os._exit(1)
    if case == spec["hang_in"]:
        time.sleep(60)
    print("CASE " + json.dumps({"case": case, "us": 1.0}), flush=True)
"""


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_without_a_gpu_it_says_so_in_one_line() -> None:
    proc = run_bench()
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "needs a CUDA or ROCm GPU" in proc.stderr


@pytest.mark.parametrize(
    "args", [["--rows", "3072,x"], ["--zipf", "1"], ["--table-gib", "0"], ["--nope"]]
)
def test_bad_arguments_are_one_line(args: list[str]) -> None:
    proc = run_bench(*args)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")
    assert proc.stderr.count("\n") == 1


def test_a_case_that_dies_is_reported_and_the_rest_run(tmp_path: Path) -> None:
    child = tmp_path / "child.py"
    child.write_text(FAKE_CHILD)
    bench = load(BENCH)
    cases = ["uva:1:uniform", "uva:2:uniform", "uva:3:uniform", "uva:4:uniform"]
    spec = {"die_in": "uva:2:uniform", "hang_in": "uva:4:uniform"}
    results, failures = bench.run_cases(cases, spec, timeout=3, child=child)
    assert sorted(results) == ["uva:1:uniform", "uva:3:uniform"]
    assert len(failures) == 2
    assert failures[0].startswith("uva:2:uniform: exit 1: an illegal memory access")
    assert failures[1] == "uva:4:uniform: no answer in 3 s"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU run is device_check.sh's")
def test_the_child_measures_every_kind_of_case_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The child's cases on CPU tensors (Triton interpreter, a stand-in clock): every
    case reports, and the UVA bytes equal the HBM gather's."""
    cases = load(CASES)
    monkeypatch.setattr(cases, "DEVICE", "cpu")
    monkeypatch.setattr(cases, "REPLAYS", 2)
    monkeypatch.setattr(cases, "NAIVE_REPS", 2)
    monkeypatch.setattr(
        cases, "timed", lambda fn, batches, rep_ms: (fn(batches[0]), 1e-3, "eager")[1:]
    )
    names = [
        f"{k}:{n}:{d}"
        for k in ("naive", "uva", "hbm")
        for n in (96, 300)
        for d in ("uniform", "zipf")
    ]
    spec = {
        "cases": names,
        "table_gib": 4000 * 264 / 2**30,
        "head_dim": 256,
        "zipf": 1.1,
        "rep_ms": 10,
    }
    monkeypatch.setattr(cases, "uses_dedup", lambda weight, n: n >= 300)
    cases.main(spec)
    lines = [
        json.loads(line[5:])
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("CASE ")
    ]
    assert [r["case"] for r in lines] == names
    uva = [r for r in lines if r["case"].startswith("uva")]
    assert all(r["equal"] for r in uva)
    assert [r["dedup_used"] for r in uva] == [False, False, True, True]


def test_the_report_reads_every_figure_and_survives_missing_cases(
    capsys: pytest.CaptureFixture,
) -> None:
    bench = load(BENCH)
    args = bench._parser().parse_args([])
    results = {"ceilings:0:-": {"h2d_gbps": 50.0, "d2d_gbps": 4000.0}}
    for n in args.rows:
        for dist in ("uniform", "zipf"):
            dedup = n >= 65536
            us = n * 264 / 30e3  # 30 GB/s
            results[f"uva:{n}:{dist}"] = {
                "us": us, "us_plain": us, "us_dedup": us * 1.02, "dedup_used": dedup,
                "unique_ratio": 1.0, "equal": True,
            }  # fmt: skip
            results[f"naive:{n}:{dist}"] = {"us": 2 * us}
            results[f"hbm:{n}:{dist}"] = {"us": n * 776 / 3e6}  # 3 TB/s
    summary = bench.summarize(args, results, [])["summary"]
    assert summary["uva_vs_h2d"][3072] == pytest.approx(0.6)
    assert summary["uva_vs_naive"][393216] == pytest.approx(2.0)
    assert summary["zipf_vs_uniform"][12288] == pytest.approx(1.0)
    assert summary["hbm_vs_d2d"] == pytest.approx(0.75)
    assert summary["dedup_cost_no_repeats"] == {393216: pytest.approx(0.02)}
    del results["uva:393216:zipf"], results["ceilings:0:-"]
    results["uva:3072:zipf"]["equal"] = False
    report = bench.summarize(args, results, ["uva:393216:zipf: exit 1: fault"])
    bench.print_report(report)
    assert report["summary"]["mismatches"] == ["uva:3072:zipf"]
    assert report["summary"]["uva_vs_h2d"][3072] is None
    assert "faults: 1; UVA bytes differing from the HBM gather's: uva:3072:zipf" in (
        capsys.readouterr().out
    )
