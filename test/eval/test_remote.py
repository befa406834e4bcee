"""engram.eval ablate --url against a stand-in server (a process answering SGLang's
``/generate`` greedily with the reference model); the real PD deployment is in
``test/serving/test_pd.py``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from engram.eval import REGIMES, Sample, ablate
from engram.eval.__main__ import main
from engram.eval.remote import remote_exact_match


@contextmanager
def standin(model_dir, *flags: str) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "test.eval.standin_server", str(model_dir), *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("port "), f"stand-in server did not start: {line!r}"
        yield f"http://127.0.0.1:{line.split()[1]}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _own_continuations(model, n: int, k: int) -> list[Sample]:
    """Prompts whose reference continuation is the model's own greedy one with Engram on
    everywhere (so ``both`` matches all of them and the others fall short)."""
    out = []
    for _ in range(n):
        prompt = torch.randint(3, model.config.vocab_size, (int(torch.randint(6, 20, ())),))
        out.append(Sample(prompt.tolist(), model.generate(prompt.tolist(), k)))
    return out


@pytest.mark.slow
def test_url_mode_scores_what_the_deployment_decodes(tiny, tiny_dir):
    k = 6
    samples = [s for s in _own_continuations(tiny, 5, k) if len(s.continuation) == k]
    local = ablate(tiny, samples, k).regimes
    assert local["both"].exact_match == 1.0
    with standin(tiny_dir) as url:
        assert remote_exact_match(url, samples, k).exact_match == 1.0
    with standin(tiny_dir, "--decode-engram", "off") as url:
        pd_off = remote_exact_match(url, samples, k).exact_match
    assert pd_off == local["prefill_only"].exact_match
    assert set(REGIMES) == set(local)


def test_unreachable_url_is_one_clear_line(tiny_dir, capsys):
    argv = ["ablate", "--model", str(tiny_dir), "--url", "http://127.0.0.1:9"]
    assert main([*argv, "--data", __file__, "--max-samples", "2"]) == 2
    assert capsys.readouterr().err.startswith("error: cannot reach http://127.0.0.1:9 ")
