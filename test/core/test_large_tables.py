"""``build --random --engram-table-gib G``: tables of the asked size, valid FP8 rows,
written by the streaming safetensors writer, loadable by safetensors and the model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from engram.errors import EngramConfigError
from engram.files import GIB
from engram.fp8 import SCALE_NAN, row_bytes
from engram.model import TinyEngramModel
from engram.model.__main__ import main
from engram.model.large_tables import weight_chunks
from engram.model.safetensors_stream import StreamedTensor, write_safetensors
from engram.token_map import CACHE_ENV

GIB_ASKED = 0.02


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        out = tmp_path_factory.mktemp("large")
        seed = int(torch.randint(0, 1000, ()))
        argv = ["build", "--random", "--out", str(out), "--engram-table-gib", str(GIB_ASKED)]
        assert main([*argv, "--seed", str(seed)]) == 0
        yield out, seed


def test_tables_have_the_asked_size_and_valid_fp8_rows(large):
    out, _ = large
    cfg = json.loads((out / "config.json").read_text())
    rows = cfg["engram_num_embeddings"]
    assert len(rows) == 2
    size = sum(rows) * row_bytes(cfg["engram_head_dim"])
    assert abs(size / (GIB_ASKED * GIB) - 1) < 0.01, size
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        for layer, n in zip(cfg["engram_layer_ids"], rows, strict=True):
            weight = f.get_tensor(f"model.layers.{layer}.engram.embed.weight")
            scale = f.get_tensor(f"model.layers.{layer}.engram.embed.scale")
            assert weight.dtype == torch.float8_e4m3fn and weight.shape == (n, 64)
            assert scale.dtype == torch.float8_e8m0fnu and scale.shape == (n, 2)
            w, s = weight.view(torch.uint8), scale.view(torch.uint8)
            assert not bool(((w & 0x7F) == 0x7F).any()), "an e4m3 NaN byte"
            assert not bool((s == SCALE_NAN).any())
            # random rows: every non-NaN byte value shows up, rows differ
            assert torch.unique(w).numel() == 254
            assert not torch.equal(w[0], w[1])


def test_same_options_same_bytes_and_the_model_loads(large, tmp_path):
    out, seed = large
    again = tmp_path / "again"
    argv = ["build", "--random", "--out", str(again), "--engram-table-gib", str(GIB_ASKED)]
    assert main([*argv, "--seed", str(seed)]) == 0
    for name in ("config.json", "model.safetensors"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name
    assert main([*argv, "--seed", str(seed), "--reuse"]) == 0
    model = TinyEngramModel.from_pretrained(out, "dram")
    try:
        assert len(model.generate([5, 9, 11, 200], 4)) == 4
    finally:
        model.close()


def test_nan_bytes_are_replaced_not_dropped():
    # a chunk covering many words: every 0x7F/0xFF became 0x7E/0xFE, nothing else moved
    raw = next(weight_chunks(int(torch.randint(0, 1 << 30, ())), 1, 4096, 64))
    counts = np.bincount(raw, minlength=256)
    assert counts[0x7F] == counts[0xFF] == 0
    assert counts[0x7E] > 1.5 * counts[0x7D] and counts[0xFE] > 1.5 * counts[0xFD]


def test_streamed_file_equals_what_safetensors_saves(tmp_path):
    tensors = {
        "a.weight": torch.randn(7, 5).to(torch.bfloat16),
        "b.rows": torch.randint(0, 126, (9, 64), dtype=torch.uint8).view(torch.float8_e4m3fn),
        "b.scale": torch.randint(100, 130, (9, 2), dtype=torch.uint8).view(torch.float8_e8m0fnu),
        "c": torch.randn(3),
    }
    streamed = [StreamedTensor.of(n, t) for n, t in tensors.items()]
    # one tensor given in uneven chunks
    rows = tensors["b.rows"].view(torch.uint8).numpy()
    streamed[1] = StreamedTensor(
        "b.rows", torch.float8_e4m3fn, (9, 64), lambda: [rows[:2], rows[2:3].tobytes(), rows[3:]]
    )
    size = write_safetensors(tmp_path / "ours.safetensors", streamed, {"format": "pt"})
    assert size == (tmp_path / "ours.safetensors").stat().st_size
    save_file(tensors, str(tmp_path / "theirs.safetensors"))
    ours, theirs = (
        load_file(tmp_path / "ours.safetensors"),
        load_file(tmp_path / "theirs.safetensors"),
    )
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name].dtype == theirs[name].dtype
        assert torch.equal(ours[name].view(torch.uint8), theirs[name].view(torch.uint8)), name


def test_a_tensor_of_the_wrong_size_leaves_no_file(tmp_path):
    short = StreamedTensor(
        "x",
        torch.uint8,
        (10,),
        lambda: [np.random.default_rng().integers(0, 256, 9, dtype=np.uint8)],
    )
    with pytest.raises(EngramConfigError, match="x gave 9 bytes, its shape needs 10"):
        write_safetensors(tmp_path / "bad.safetensors", [short])
    assert list(Path(tmp_path).iterdir()) == []
