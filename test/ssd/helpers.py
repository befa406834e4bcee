"""Builders shared by the SSD tests: fresh random FP8 tables and small checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from engram.fp8 import quantize_rows
from engram.primes import prime_layout

REPO = Path(__file__).resolve().parents[2]


def random_table(rows: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 rows of fresh random values (spread over many exponents), as uint8."""
    values = torch.randn(rows, head_dim) * torch.exp2(torch.randint(-6, 7, (rows, 1)).float())
    return quantize_rows(values)


def tiny_spec_config(
    vocab: int = 500, layers: tuple[int, ...] = (1, 3), head_dim: int = 64
) -> dict:
    """``engram_*`` config fields whose row counts match their prime layout."""
    primes = prime_layout(len(layers), 3, 4, vocab)
    sums = [sum(p for order in layer for p in order) for layer in primes]
    return {
        "engram_layer_ids": list(layers),
        "engram_num_embeddings": sums,
        "engram_max_ngram_size": 3,
        "engram_vocab_size": vocab,
        "engram_n_heads": 4,
        "engram_head_dim": head_dim,
    }


def write_checkpoint(
    directory: Path, config: dict, *, prefix: str = "model.", with_config: bool = True
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """A safetensors checkpoint holding random Engram tables for ``config``; returns them."""
    directory.mkdir(parents=True, exist_ok=True)
    tables, tensors = {}, {}
    for layer, rows in zip(
        config["engram_layer_ids"], config["engram_num_embeddings"], strict=True
    ):
        weight, scale = random_table(rows, config["engram_head_dim"])
        tables[layer] = (weight, scale)
        tensors[f"{prefix}layers.{layer}.engram.embed.weight"] = weight.view(torch.float8_e4m3fn)
        tensors[f"{prefix}layers.{layer}.engram.embed.scale"] = scale.view(torch.float8_e8m0fnu)
    tensors[f"{prefix}norm.weight"] = torch.ones(8, dtype=torch.bfloat16)
    # NOTE: imported here: the lent GPU machine runs test_gpu.py without safetensors.
    from safetensors.torch import save_file

    save_file(tensors, str(directory / "model.safetensors"))
    if with_config:
        (directory / "config.json").write_text(json.dumps(config))
    return tables


def run_convert(*args: str, preexec=None) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    """``python -m engram.convert ARGS`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "engram.convert", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=preexec,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def crash_convert(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m engram.convert ARGS`` in a child the kernel kills (SIGXFSZ) at its first
    write past 1 MiB: a real crash in the middle of a table, at a reproducible point
    (Python ignores that signal by default; the child restores the default)."""
    crash = (
        "import resource, signal, sys; from engram.convert import main; "
        "signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20)); "
        "sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", crash, *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )
