"""``benchmark/decode_coverage.py`` end to end on small tables: both backbones built and
profiled, every figure in its last line of JSON, and the text backbone's decode lookups
covered by the profile where the random model's are not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmark" / "decode_coverage.py"


@pytest.mark.slow
def test_a_small_run_reports_both_backbones(tmp_path: Path) -> None:
    prompts, prompt_tokens, new_tokens = 3, 64, 12
    cmd = [
        sys.executable, str(SCRIPT), "--table-gib", "0.01", "--prompts", str(prompts),
        "--prompt-tokens", str(prompt_tokens), "--new-tokens", str(new_tokens),
        "--work", str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    backbones = result["backbones"]
    assert set(backbones) == {"random", "text"}
    for r in backbones.values():
        cols = 2 * 12  # two Engram layers, (4 - 1) orders x 4 heads
        assert r["generated_tokens"] == prompts * new_tokens
        assert 1 <= r["distinct_generated_ids"] <= r["generated_tokens"]
        assert r["prefill"]["lookups"] == prompts * prompt_tokens * cols
        assert r["decode"]["lookups"] == prompts * (new_tokens - 1) * cols
        assert r["heldout_next"]["lookups"] == r["decode"]["lookups"]
        for phase in ("prefill", "decode", "heldout_next"):
            assert 0 <= r[phase]["coverage"] <= 1 and 0 <= r[phase]["distinct_coverage"] <= 1
        assert len(r["continuations"]) == prompts
        assert r["profile_top"] == -(-max(r["table_rows"]) // 16)
    # the text backbone writes text its profile knows; the random model does not
    # NOTE: the profile is of the benchmark text (engram_testing.bench_text), not of the
    # stdlib the model was trained on: 0.22 against 0.06 here (0.56 against 0.07 at the
    # defaults; 0.48 against 0.11 here over the stdlib's train split)
    assert backbones["text"]["decode"]["coverage"] > backbones["random"]["decode"]["coverage"] + 0.1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--table-gib", "0"], "--table-gib: must be a number > 0"),
        (["--new-tokens", "1"], "--new-tokens: must be"),
        (["--backbones", "big"], "invalid choice: 'big'"),
        (["--work", "{file}"], "is a file; give a directory"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "a-file").write_text("")
    args = [a.format(file=tmp_path / "a-file") for a in args]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], lines
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]  # nothing was built
