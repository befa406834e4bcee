"""Serving the tiny Engram model through SGLang on a GPU (skipped without one)."""

from __future__ import annotations

import random

import pytest

from test.serving.server import build_tiny_model, generate, metrics, metrics_after, sglang_server

pytestmark = pytest.mark.gpu

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hum".split()


def _prompts(n: int = 6) -> list[str]:
    return [" ".join(random.choices(WORDS, k=random.randint(4, 40))) for _ in range(n)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny-engram")


def test_every_placement_serves_and_off_differs(tiny, tmp_path):
    prompts = _prompts()
    outputs = {}
    for placement in ("hbm", "dram", "ssd", "off"):
        extra = ["--engram-ssd-dir", str(tmp_path / "ssd")] if placement == "ssd" else []
        with sglang_server(
            tiny, "--engram-offload", placement, *extra, log=tmp_path / f"{placement}.log"
        ) as url:
            rows = "sglang:engram_rows_requested_total"
            before = metrics(url)
            outputs[placement] = generate(url, prompts)
            after = metrics_after(url, before, rows) if placement != "off" else before
        if placement != "off":
            assert after.get(rows, 0) > before.get(rows, 0), placement
            assert after.get("sglang:engram_lookup_seconds_count", 0) > 0
            log = (tmp_path / f"{placement}.log").read_text()
            assert f"placement {placement}" in log
    assert outputs["hbm"] == outputs["dram"] == outputs["ssd"]
    assert outputs["off"] != outputs["hbm"]


def test_ssd_tables_are_reused_on_the_second_start(tiny, tmp_path):
    ssd = tmp_path / "ssd"
    args = ("--engram-offload", "ssd", "--engram-ssd-dir", str(ssd))
    prompts = _prompts(2)
    with sglang_server(tiny, *args, log=tmp_path / "first.log") as url:
        first = generate(url, prompts)
    stamp = {p: p.stat().st_mtime_ns for p in ssd.rglob("rows.bin")}
    assert stamp
    with sglang_server(tiny, *args, log=tmp_path / "second.log") as url:
        assert generate(url, prompts) == first
    assert {p: p.stat().st_mtime_ns for p in ssd.rglob("rows.bin")} == stamp
