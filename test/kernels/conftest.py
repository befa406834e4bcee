"""Kernel tests run twice: on CPU tensors under the Triton interpreter (CI) and on a GPU.

NOTE: TRITON_INTERPRET is set here, before anything below imports engram_kernels, when
no GPU is present. engram_kernels also picks the interpreter by itself on such a machine
(``engram_kernels/_jit.py``), so the order in which pytest imports other test packages
(some import triton first) does not matter.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import engram_kernels  # noqa: E402

DEVICES = [
    pytest.param(
        "cpu",
        marks=pytest.mark.skipif(
            not engram_kernels.INTERPRET,
            reason="interpreter checks run where Triton interprets (no GPU, or TRITON_INTERPRET=1)",
        ),
        id="interpreter",
    ),
    pytest.param("cuda", marks=pytest.mark.gpu, id="gpu"),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)
