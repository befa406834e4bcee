"""The reference model on a GPU (``--device cuda`` of generate / ablate / gate-scan): the
bundled trained model gives the same greedy tokens with its tables in hbm and in dram
(registered host memory read by the kernel), and logits close to the CPU run's."""

from __future__ import annotations

import pytest
import torch

from engram.model import TinyEngramModel
from engram.model.builder import TRAINED_MODEL

pytest.importorskip("tokenizers")  # the lent GPU machine may lack it: carry its wheel


@pytest.mark.gpu
def test_trained_model_on_the_gpu_matches_the_cpu_and_across_placements() -> None:
    cpu = TinyEngramModel.from_pretrained(TRAINED_MODEL, "hbm")
    hbm = TinyEngramModel.from_pretrained(TRAINED_MODEL, "hbm", device="cuda")
    dram = TinyEngramModel.from_pretrained(TRAINED_MODEL, "dram", device="cuda")
    try:
        n = int(torch.randint(16, 48, ()))
        prompt = torch.randint(3, cpu.config.vocab_size, (n,)).tolist()
        want = cpu(prompt).float()
        got = hbm(prompt).float().cpu()
        scale = float(want.abs().max())
        torch.testing.assert_close(got, want, atol=0.05 * scale, rtol=0.02)
        # hbm and dram gather bit-identical rows on the device: same greedy tokens.
        assert hbm.generate(prompt, 12) == dram.generate(prompt, 12)
        assert torch.equal(hbm(prompt), dram(prompt))
    finally:
        for model in (cpu, hbm, dram):
            model.close()
