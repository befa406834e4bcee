"""`doctor`'s host-table checks (sglang_engram.doctor.rocm): XNACK, the device address
of registered host memory, huge pages behind a fresh host buffer."""

from __future__ import annotations

import pytest
from sglang_engram.doctor import report as doctor
from sglang_engram.doctor import rocm as rocm_checks


@pytest.mark.parametrize(
    ("rocm", "env", "ok"),
    [
        (True, {"HSA_XNACK": "1"}, False),
        (True, {}, False),
        (True, {"HSA_XNACK": "0"}, True),
        (False, {"HSA_XNACK": "1"}, True),  # XNACK is an AMD setting
    ],
)
def test_xnack(rocm: bool, env: dict[str, str], ok: bool) -> None:
    result = rocm_checks.xnack(rocm, env)
    assert result["ok"] is ok
    assert (result["advice"] is None) is ok
    if not ok:
        assert "HSA_XNACK=0" in result["advice"] and "fault" in result["advice"]


def test_huge_pages_match_the_thp_setting() -> None:
    result = rocm_checks.huge_pages()
    assert result["fraction"] is not None and 0.0 <= result["fraction"] <= 1.0
    assert result["ok"] == (result["fraction"] >= 0.9)
    assert (result["advice"] is None) == result["ok"]
    thp = doctor.host_memory_report()["transparent_hugepages"]
    if thp == "never":
        assert not result["ok"]  # no THP and an anonymous buffer: small pages only


def test_doctor_reports_host_tables() -> None:
    report = doctor.collect(apply_hooks=False)
    tables = report["host_tables"]
    assert set(tables) >= {"rocm", "xnack", "device_address", "huge_pages", "advice"}
    assert all(note in report["advice"] for note in tables["advice"])
    assert "host tables: XNACK" in doctor.render(report)


def test_doctor_names_both_kinds_of_huge_pages_and_the_missing_gpu() -> None:
    report = doctor.collect(apply_hooks=False)
    text = doctor.render(report)
    host = report["host_memory"]
    # The reserved hugetlbfs pool and transparent huge pages are told apart: a machine
    # with an empty pool and THP on shows both, without contradicting itself.
    assert f"transparent huge pages (THP): {host['transparent_hugepages']}" in text
    assert (
        f"hugetlbfs pool: {host['hugepages_free']} of {host['hugepages_total']} pages free" in text
    )
    assert "huge pages 0/0" not in text
    gpu = report["host_tables"]["gpu"]
    assert ("XNACK not checked (no GPU)" in text) is (not gpu)
    assert ("n/a (CUDA)" in text) is (gpu and not report["host_tables"]["rocm"])


@pytest.mark.gpu
def test_registered_host_memory_has_a_device_address() -> None:
    result = rocm_checks.device_address()
    assert result["checked"] and result["ok"], result
    assert int(result["device"], 16) != 0
    assert result["same"] == (result["device"] == result["host"])
