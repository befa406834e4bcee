"""Training the tiny Engram model: the loss falls, the baseline gets the same budget, the
written directory loads like the random build, and a seed reproduces the bytes."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch
from safetensors import safe_open

from engram.model import BuildOptions, TinyEngramModel, build_tiny_model
from engram.model.builder import TRAINED_MODEL
from engram.model.corpus import Document, split_documents, token_stream
from engram.model.tokenizer import EOS_TOKEN_ID, train_tokenizer
from engram.model.train import (
    TrainOptions,
    bits_per_token,
    make_config,
    new_model,
    train,
    train_one,
)
from engram.token_map import CACHE_ENV, build_token_map

WORDS = [
    "def",
    "return",
    "self",
    "import",
    "os",
    "(x)",
    "if",
    "else:",
    "for",
    "in",
    "None",
    "print",
    "value",
    "class",
    "Thing:",
    "=",
    "+",
    "1",
    "0",
    "pass",
]
OPTS = TrainOptions(
    steps=30,
    batch_size=4,
    seq_len=32,
    vocab_size=300,
    eval_tokens=1024,
    minutes=None,
    threads=1,
    log_every=10,
    build=BuildOptions(engram_vocab_size=300),
)


@pytest.fixture(autouse=True)
def _token_map_cache_and_threads(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _docs(n_train: int = 6, n_held: int = 2) -> list[Document]:
    rng = random.Random(int(torch.randint(0, 2**31, ())))
    docs: list[Document] = []
    i = 0
    while len(docs) < n_train + n_held:
        doc = Document(
            f"doc{i}.py",
            "\n".join(
                "    ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(60)
            ),
        )
        i += 1
        held = sum(d.split == "heldout" for d in docs)
        if (doc.split == "heldout" and held < n_held) or (
            doc.split == "train" and len(docs) - held < n_train
        ):
            docs.append(doc)
    return docs


def test_a_few_steps_lower_the_loss():
    from tokenizers import Tokenizer

    torch.set_num_threads(OPTS.threads)
    docs = split_documents(_docs(), "train")
    tokenizer = Tokenizer.from_str(train_tokenizer(texts=[d.text for d in docs], vocab_size=300))
    stream = token_stream(tokenizer, docs, EOS_TOKEN_ID)
    token_map, compressed = build_token_map(tokenizer)
    cfg = dataclasses.replace(
        make_config(OPTS.build, token_map.numel(), compressed), torch_dtype="float32"
    )
    for engram in (True, False):
        model = new_model(cfg, token_map, OPTS.seed, engram)
        before = bits_per_token(model, stream, OPTS)
        result = train_one(model, stream, OPTS, "test", OPTS.steps, lambda line: None)
        after = bits_per_token(model, stream, OPTS)
        assert result.steps == OPTS.steps and not result.stopped_early
        assert after < before - 1.0, (engram, before, after)


def test_train_writes_a_servable_model_reproducibly(tmp_path):
    docs = _docs()
    logs: list[str] = []
    report = train(tmp_path / "a", OPTS, docs, logs.append)
    assert report["steps"] == {"engram": OPTS.steps, "baseline": OPTS.steps}
    assert report["tokens_seen"]["engram"] == OPTS.steps * OPTS.tokens_per_step
    assert set(report["heldout_bits_per_token"]) == {"engram", "baseline"}
    assert any("tokens/s" in line and "loss" in line for line in logs)
    saved = json.loads((tmp_path / "a" / "train_report.json").read_text())
    assert saved["heldout_bits_per_token"] == report["heldout_bits_per_token"]

    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["torch_dtype"] == "bfloat16" and cfg["engram_layer_ids"] == [1, 3]
    with safe_open(str(tmp_path / "a" / "model.safetensors"), framework="pt") as f:
        assert f.get_tensor("model.layers.1.engram.embed.weight").dtype == torch.float8_e4m3fn
        assert f.get_tensor("model.layers.1.engram.embed.scale").dtype == torch.float8_e8m0fnu
        assert not [k for k in f.keys() if "table" in k]
    model = TinyEngramModel.from_pretrained(tmp_path / "a", "dram")
    try:
        assert len(model.generate([5, 6, 7], 4)) >= 1
    finally:
        model.close()

    train(tmp_path / "b", OPTS, docs, logs.append)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_corpus_that_tokenizes_to_nothing_is_named(tmp_path):
    from tokenizers import Tokenizer

    from engram.errors import EngramInputError

    tokenizer = Tokenizer.from_str(train_tokenizer(texts=["a b c"], vocab_size=300))
    with pytest.raises(EngramInputError, match="tokenizes to nothing"):
        token_stream(tokenizer, [Document("empty.py", "")], EOS_TOKEN_ID)


@pytest.mark.skipif(not (TRAINED_MODEL / "model.safetensors").is_file(), reason="not bundled")
def test_bundled_model_has_the_random_builds_layout(tmp_path):
    """The plugin loads the trained model exactly like the random one: same config keys and
    tensor names, dtypes and shapes; its training report is bundled too."""
    build_tiny_model(tmp_path / "random")
    trained = json.loads((TRAINED_MODEL / "config.json").read_text())
    random_cfg = json.loads((tmp_path / "random" / "config.json").read_text())
    assert set(trained) == set(random_cfg)
    differ = {k for k in trained if trained[k] != random_cfg[k]}
    assert differ <= {"engram_compressed_vocab_size"}, differ
    with (
        safe_open(str(TRAINED_MODEL / "model.safetensors"), framework="pt") as a,
        safe_open(str(tmp_path / "random" / "model.safetensors"), framework="pt") as b,
    ):
        assert set(a.keys()) == set(b.keys())
        for name in a.keys():
            x, y = a.get_slice(name), b.get_slice(name)
            assert (x.get_dtype(), x.get_shape()) == (y.get_dtype(), y.get_shape()), name
    report = json.loads((TRAINED_MODEL / "train_report.json").read_text())
    bits = report["heldout_bits_per_token"]
    assert bits["engram"] < bits["baseline"]


@pytest.mark.skipif(not (TRAINED_MODEL / "model.safetensors").is_file(), reason="not bundled")
def test_generate_runs_the_bundled_model_without_a_gpu(capsys):
    from engram.model.__main__ import main

    main(["generate", "--placement", "ssd", "--max-new-tokens", "6", "def "])  # temp ssd dir
    on = capsys.readouterr().out
    main(["generate", "--placement", "off", "--max-new-tokens", "6", "def "])
    off = capsys.readouterr().out
    assert on.startswith("def ") and len(on.strip()) > len("def")
    assert on != off
