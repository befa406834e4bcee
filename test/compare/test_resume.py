"""``sweep --resume`` continues only the sweep the run directory records."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from sglang_engram.compare.resume import (
    ResumeRefused,
    check_resume,
    spec_changes,
    spec_record,
    start_over,
)
from sglang_engram.compare.spec import parse_sweep_spec


def _data() -> dict:
    return {
        "name": "s",
        "model": "/m",
        "workload": {"fixed": {"input_len": random.randint(16, 4096), "output_len": 32}},
        "concurrency": [1, 2, 4],
        "configs": [
            {"name": "dram", "launch": {"engram_offload": "dram"}},
            {"name": "remote", "url": "http://h:1", "num_gpus": 2, "placement": "ssd"},
        ],
    }


def _changes(old: dict, new: dict) -> list[str]:
    as_dict = lambda d: json.loads(spec_record(parse_sweep_spec(d)))  # noqa: E731
    return spec_changes(as_dict(old), as_dict(new))


def test_added_configs_and_concurrencies_are_no_change() -> None:
    old = _data()
    new = copy.deepcopy(old)
    new["configs"].append({"name": "hbm", "launch": {"engram_offload": "hbm"}})
    new["concurrency"].append(8)
    new["point_timeout_s"] = 60.0  # a timeout decides whether a point ends, not its numbers
    assert _changes(old, new) == []


def test_every_change_of_measured_things_is_named() -> None:
    old = _data()
    new = copy.deepcopy(old)
    length = old["workload"]["fixed"]["input_len"]
    new["workload"]["fixed"]["input_len"] = length // 2
    new["configs"][0]["launch"]["engram_offload"] = "hbm"
    del new["configs"][1]
    new["concurrency"] = [1, 2]
    new["seed"] = 7
    assert _changes(old, new) == [
        "concurrency 4 dropped",
        'configs[dram].launch.engram_offload "dram" -> "hbm"',
        "configs[remote] dropped",
        "seed 1 -> 7",
        f"workload.fixed.input_len {length} -> {length // 2}",
    ]


def test_refusal_names_the_changes_and_the_way_out(tmp_path: Path) -> None:
    old = _data()
    (tmp_path / "spec.json").write_text(spec_record(parse_sweep_spec(old)))
    new = copy.deepcopy(old)
    new["model"] = "/other"
    with pytest.raises(ResumeRefused) as exc:
        check_resume(tmp_path, parse_sweep_spec(new), [])
    assert 'model "/m" -> "/other"' in str(exc.value) and "--force-new" in str(exc.value)
    check_resume(tmp_path, parse_sweep_spec(old), [])  # the same spec resumes


def test_without_spec_json_the_points_own_workload_is_compared(tmp_path: Path) -> None:
    spec = parse_sweep_spec(_data())
    row = {"config": "dram", "max_concurrency": 1, "model": "/m"}
    check_resume(tmp_path, spec, [{**row, "workload": spec.workload.describe()}])
    other = {**spec.workload.describe(), "output_len": 64}
    with pytest.raises(ResumeRefused, match="workload.output_len 64 -> 32"):
        check_resume(tmp_path, spec, [{**row, "workload": other}])


def test_an_unreadable_record_is_named(tmp_path: Path) -> None:
    (tmp_path / "spec.json").write_bytes(b"\xff\x00")
    with pytest.raises(ResumeRefused, match=r"spec.json cannot be read as the recorded"):
        check_resume(tmp_path, parse_sweep_spec(_data()), [])


def test_start_over_moves_the_old_run_aside(tmp_path: Path) -> None:
    lines = "".join(json.dumps({"n": random.random()}) + "\n" for _ in range(3))
    (tmp_path / "results.jsonl").write_text(lines)
    (tmp_path / "spec.json").write_text("{}")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a_c1.log").write_text("log")
    (tmp_path / "report").mkdir()  # not the sweep's: stays
    aside = start_over(tmp_path)
    assert aside is not None and aside.parent == tmp_path and aside.name.startswith("previous-")
    assert (aside / "results.jsonl").read_text() == lines
    assert (aside / "raw" / "a_c1.log").read_text() == "log"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([aside.name, "report"])
    assert start_over(tmp_path) is None
