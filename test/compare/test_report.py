"""`report` on results with hand-computed answers: frontier membership, PCHIP values,
dominance shares, tokens per dollar, host-DRAM pricing, unknown SKUs, CPU points (per
host, unpriced unless --costs prices them) and the charts."""

from __future__ import annotations

import json
import os
import random
import stat
from pathlib import Path

import pytest
from sglang_engram.compare.__main__ import main
from sglang_engram.compare.costs import load_costs
from sglang_engram.compare.results import append_result

GIB = 1 << 30


def _row(sku: str, config: str, c: int, tpot: float, total: float, gpus: int = 1, **kw):
    return {
        "sku": sku,
        "config": config,
        "placement": config,
        "vendor": "amd" if sku.startswith("MI") else "nvidia",
        "num_gpus": gpus,
        "max_concurrency": c,
        "p90_tpot_ms": tpot,
        "total_throughput": total,
        "status": "ok",
        **kw,
    }


# Group H200/dram: interactivity 200, 125, 100, 50; (100, 2500) is beaten by (125, 3000).
DRAM = [(1, 5.0, 1000.0), (4, 8.0, 3000.0), (8, 10.0, 2500.0), (16, 20.0, 6000.0)]
# Group H200/ssd: interactivity 160, 100, 40: all on its frontier, all beaten by dram.
SSD = [(1, 6.25, 800.0), (4, 10.0, 2000.0), (16, 25.0, 4000.0)]


def _write(tmp_path: Path, rows: list[dict], name: str) -> Path:
    path = tmp_path / name
    random.shuffle(rows)  # order must not matter
    for row in rows:
        append_result(path, row)
    return path


@pytest.fixture
def results(tmp_path: Path) -> list[Path]:
    h200 = [_row("H200", "dram", *p) for p in DRAM] + [_row("H200", "ssd", *p) for p in SSD]
    h200.append({**_row("H200", "dram", 32, 0.0, 0.0), "status": "failed", "error": "boom"})
    mi = [_row("MI355X", "dram", 4, 8.0, 5000.0, gpus=2)]
    return [_write(tmp_path, h200, "h200.jsonl"), _write(tmp_path, mi, "mi355x.jsonl")]


def test_report_numbers(tmp_path: Path, results: list[Path]) -> None:
    out = tmp_path / "report"
    argv = ["report", *map(str, results), "--out", str(out), "--at", "125", "100", "250"]
    assert main([*argv, "--note", "hand-made rows"]) == 0
    s = json.loads((out / "summary.json").read_text())
    dram, ssd, mi = (s["groups"][g] for g in ("H200/dram", "H200/ssd", "MI355X/dram"))
    assert (dram["points"], dram["failed"], ssd["points"], mi["points"]) == (4, 1, 3, 1)

    front = [
        (p["interactivity"], p["tput_per_device"], p["max_concurrency"]) for p in dram["frontier"]
    ]
    assert front == [(50.0, 6000.0, 16), (125.0, 3000.0, 4), (200.0, 1000.0, 1)]
    assert [p["max_concurrency"] for p in ssd["frontier"]] == [16, 4, 1]

    # On a frontier node the curve passes through it: tokens/$ = 3000 * 3600 / 1.41.
    assert dram["at"]["125"]["tput_per_device"] == pytest.approx(3000.0)
    assert dram["at"]["125"]["tokens_per_dollar"] == pytest.approx(3000 * 3600 / 1.41)
    # Between nodes, PCHIP by hand: slopes -40 and -26.67 over h = 75; node slopes -46.67
    # (end) and -32 (harmonic mean); Hermite basis at t = 2/3: (42000 - 7000 + 60000 + 9600) / 27.
    assert dram["at"]["100"]["tput_per_device"] == pytest.approx(104600 / 27)
    # ssd at 125: t = 5/12 on [100, 160], node slopes -25 and -13.33:
    # (1078*2000 - 245*60*25 + 650*800 + 175*60*40/3) / 1728.
    ssd_125 = 2448500 / 1728
    assert ssd["at"]["125"]["tput_per_device"] == pytest.approx(ssd_125)
    for group in (dram, ssd, mi):
        assert group["at"]["250"] == {"tput_per_device": None, "tokens_per_dollar": None}
    # A lone frontier point gives a value only at its own interactivity.
    assert mi["at"]["125"]["tput_per_device"] == pytest.approx(2500.0)
    assert mi["at"]["125"]["tokens_per_dollar"] == pytest.approx(5000 * 3600 / (2 * 1.48))
    assert mi["at"]["100"]["tput_per_device"] is None

    ratio = next(
        r for r in s["ratios"] if (r["at"], r["a"], r["b"]) == (125, "H200/dram", "H200/ssd")
    )
    assert ratio["tput_per_device"] == pytest.approx(3000 / ssd_125)

    dominance = {(d["a"], d["b"]): d["dominated_share"] for d in s["dominance"]}
    assert dominance[("H200/ssd", "H200/dram")] == 1.0
    assert dominance[("H200/dram", "H200/ssd")] == 0.0
    # Per dollar, MI355X's (125 tok/s/user, 6.08 M/$) is beaten by no dram point (c=8 has
    # 6.38 M/$ but less interactivity) and beats one ssd point: (100, 5.11 M/$).
    assert dominance[("MI355X/dram", "H200/dram")] == 0.0
    assert dominance[("H200/ssd", "MI355X/dram")] == pytest.approx(1 / 3)

    md = (out / "report.md").read_text()
    assert "| H200/dram | 1 x H200 | dram | 4 | 1 |" in md and "![tput_per_device]" in md
    assert "| MI355X/dram | 2 x MI355X | dram | 1 | 0 |" in md and "No price" not in md
    assert "**hand-made rows**" in md and s["note"] == "hand-made rows"
    for png in ("tput_per_device.png", "tokens_per_dollar.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_costs_file_prices_host_dram(tmp_path: Path) -> None:
    dram_gib = random.randint(16, 512)
    row = _row("H200", "dram", 4, 8.0, 3000.0, engram={"table_bytes": {"dram": dram_gib * GIB}})
    results = _write(tmp_path, [row], "r.jsonl")
    costs = tmp_path / "costs.yaml"
    costs.write_text("usd_per_gpu_hour: {H200: 2.0}\nusd_per_dram_gib_hour: 0.005\n")
    out = tmp_path / "rep"
    assert main(["report", str(results), "--out", str(out), "--costs", str(costs)]) == 0
    s = json.loads((out / "summary.json").read_text())
    point = s["groups"]["H200/dram"]["frontier"][0]
    assert point["tokens_per_dollar"] == pytest.approx(3000 * 3600 / (2.0 + dram_gib * 0.005))
    assert s["costs"]["usd_per_gpu_hour"] == {"H200": 2.0}


def test_unknown_sku_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = _write(tmp_path, [_row("X9000", "dram", 1, 5.0, 100.0)], "r.jsonl")
    assert main(["report", str(results), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "X9000" in err and "costs.yaml" in err and "--costs" in err
    assert not (tmp_path / "rep" / "summary.json").exists()


def test_groups_whose_ranges_miss_a_target_are_named(
    tmp_path: Path, results: list[Path], capsys: pytest.CaptureFixture
) -> None:
    # MI355X/dram has one point (125 tok/s/user): at 100 it has no value, so no ratio.
    out = tmp_path / "rep"
    assert main(["report", *map(str, results), "--out", str(out), "--at", "100"]) == 0
    note = (
        "No value at 100 tok/s/user, so no ratios with: MI355X/dram (measured 125.0-125.0). "
        "Their interactivity ranges do not reach it: choose --at inside them, or sweep more "
        "concurrencies."
    )
    assert note in (out / "report.md").read_text()
    assert f"note: {note}" in capsys.readouterr().out.splitlines()
    s = json.loads((out / "summary.json").read_text())
    assert s["groups"]["MI355X/dram"]["interactivity_range"] == [125.0, 125.0]
    assert not [
        r for r in s["ratios"] if "MI355X/dram" in (r["a"], r["b"]) and r["tput_per_device"]
    ]


def test_report_files_are_readable_by_others(tmp_path: Path, results: list[Path]) -> None:
    old = os.umask(0o022)
    try:
        assert main(["report", *map(str, results), "--out", str(tmp_path / "rep")]) == 0
    finally:
        os.umask(old)
    for name in ("report.md", "summary.json", "tput_per_device.png", "tokens_per_dollar.png"):
        assert stat.S_IMODE((tmp_path / "rep" / name).stat().st_mode) == 0o644, name


def test_shipped_costs_cite_a_public_source() -> None:
    costs = load_costs()
    assert "InferenceX" in costs.source and "notes" not in costs.source


def _cpu_row(config: str, c: int, tpot: float, total: float, **kw) -> dict:
    return _row("AMD EPYC 7763", config, c, tpot, total, gpus=0, device="cpu", vendor="cpu",
                num_devices=1, cpu_cores=2, **kw)  # fmt: skip


def test_cpu_points_are_per_host_and_unpriced(tmp_path: Path) -> None:
    # dram: interactivity 40, 10; off: 25, 8 (each beaten by a dram point per host).
    dram = [(1, 25.0, random.uniform(30, 40)), (4, 100.0, random.uniform(80, 90))]
    off = [(1, 40.0, random.uniform(20, 29)), (4, 125.0, random.uniform(60, 79))]
    rows = [_cpu_row("dram", *p) for p in dram] + [_cpu_row("off", *p) for p in off]
    results = _write(tmp_path, rows, "cpu.jsonl")
    out = tmp_path / "rep"
    (out / "tokens_per_dollar.png").parent.mkdir()
    (out / "tokens_per_dollar.png").write_bytes(b"stale chart of an earlier report")
    assert main(["report", str(results), "--out", str(out), "--at", "20"]) == 0
    s = json.loads((out / "summary.json").read_text())
    g = s["groups"]["AMD EPYC 7763/dram"]
    assert (g["device"], g["num_gpus"], g["hardware"]) == ("cpu", 0, "CPU AMD EPYC 7763, 2 cores")
    by_c = {p["max_concurrency"]: p for p in g["all_points"]}
    assert by_c[4]["tput_per_device"] == pytest.approx(dram[1][2])  # one host: all of it
    assert all(p["tokens_per_dollar"] is None for p in g["all_points"])
    assert g["at"]["20"]["tokens_per_dollar"] is None and g["at"]["20"]["tput_per_device"] > 0
    dominance = {(d["a"], d["b"]): d for d in s["dominance"]}
    off_by_dram = dominance[("AMD EPYC 7763/off", "AMD EPYC 7763/dram")]
    assert off_by_dram["dominated_share"] == 1.0 and off_by_dram["axis"] == "tput_per_device"
    md = (out / "report.md").read_text()
    assert "Hardware: CPU AMD EPYC 7763, 2 cores." in md
    assert "on a CPU the host" in md and "No price for AMD EPYC 7763/dram" in md
    assert "No tokens-per-dollar chart" in md and "![tokens_per_dollar]" not in md
    assert not (out / "tokens_per_dollar.png").exists()
    assert (out / "tput_per_device.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_costs_file_prices_a_cpu_host(tmp_path: Path) -> None:
    price = round(random.uniform(0.05, 0.5), 3)
    gpu = _row("H200", "dram", 4, 8.0, 3000.0)
    results = _write(tmp_path, [_cpu_row("dram", 1, 25.0, 40.0), gpu], "r.jsonl")
    costs = tmp_path / "costs.yaml"
    costs.write_text(f"usd_per_cpu_hour: {{AMD EPYC 7763: {price}}}\n")
    out = tmp_path / "rep"
    assert main(["report", str(results), "--out", str(out), "--costs", str(costs)]) == 0
    s = json.loads((out / "summary.json").read_text())
    [cpu] = s["groups"]["AMD EPYC 7763/dram"]["all_points"]
    assert cpu["tokens_per_dollar"] == pytest.approx(40.0 * 3600 / price)
    assert s["costs"]["usd_per_cpu_hour"] == {"AMD EPYC 7763": price}
    assert s["costs"]["usd_per_gpu_hour"] == {"H200": 1.41}
    md = (out / "report.md").read_text()
    assert f"AMD EPYC 7763 {price}" in md and "No price" not in md
    assert (out / "tokens_per_dollar.png").exists()
