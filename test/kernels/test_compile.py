"""Every kernel compiles for H100/H200 (sm_90), B200 (sm_100), B300 (sm_103), MI300X
(gfx942) and MI355X (gfx950) -- no GPU needed -- the dequantising kernels keep
subnormals (no flush-to-zero), the HBM gather vectorises its row loads, and host rows
are read in vectors of 8 bytes, never 16."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test.kernels.compile_targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_kernels_compile_for_every_target() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    groups = [
        [t for t in TARGETS if t.startswith("sm")],
        [t for t in TARGETS if t.startswith("gfx")],
    ]
    # One child per vendor, side by side; each prints one JSON line.
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "test.kernels.compile_targets", *group],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for group in groups
    ]  # fmt: skip
    results: dict[str, dict[str, dict]] = {}
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-3000:]
        for variant, per_target in json.loads(out.strip().splitlines()[-1]).items():
            results.setdefault(variant, {}).update(per_target)
    failed = {
        f"{variant}@{target}": r["error"]
        for variant, per_target in results.items()
        for target, r in per_target.items()
        if not r["ok"]
    }
    assert not failed, failed
    for target, facts in results["gather_bf16"].items():
        assert facts["vector_loads"], target
    for variant in ("gather_bf16", "place_rows", "place_rows_sorted"):  # they dequantise
        for target, facts in results[variant].items():
            if target.startswith("sm"):
                assert facts["ftz"] == 0, (variant, target)
            else:
                assert facts["denorm_mode_32"] == ["3"], (variant, target)  # keep denormals
    # NOTE: host rows are read in 8-byte vectors, never 16 (staged.HOST_ALIGN): 16-byte
    # loads of host rows faulted on an H200.
    for variant in ("fetch_host_rows", "fetch_host_rows_sorted"):
        for target, facts in results[variant].items():
            assert facts["vector_loads"] and facts["loads_16b"] == 0, (variant, target)
