"""The tiny Engram model: deterministic offline build, the brief's layout, placements,
incremental decoding and config handling."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from engram.errors import EngramConfigError
from engram.model import BuildOptions, TinyEngramConfig, TinyEngramModel, build_tiny_model
from engram.model.__main__ import main
from engram.model.tokenizer import ASSET
from engram.tables import PLACEMENTS
from engram.token_map import CACHE_ENV, build_token_map

CORPUS = Path("/usr/share/common-licenses")
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
STORED = sorted(set(PLACEMENTS) - {"off"})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        out = tmp_path_factory.mktemp("tiny")
        build_tiny_model(out)
        yield out


@pytest.fixture(scope="module")
def hbm_model(model_dir):
    model = TinyEngramModel.from_pretrained(model_dir, "hbm")
    yield model
    model.close()


def _prompt(cfg: TinyEngramConfig, low: int = 8, high: int = 40) -> list[int]:
    n = int(torch.randint(low, high, ()))
    return torch.randint(3, cfg.vocab_size, (n,)).tolist()


def test_reuse_keeps_a_current_build_and_replaces_a_stale_one(model_dir, tmp_path, capsys):
    out = tmp_path / "m"
    main(["build", "--random", "--out", str(out), "--reuse"])
    assert "wrote the random tiny Engram model" in capsys.readouterr().out
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    main(["build", "--random", "--out", str(out), "--reuse"])
    assert "reusing the random tiny Engram model" in capsys.readouterr().out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    main(["build", "--random", "--out", str(out), "--reuse", "--engram-max-ngram-size", "2"])
    assert "wrote the random tiny Engram model" in capsys.readouterr().out  # other options
    assert json.loads((out / "config.json").read_text())["engram_max_ngram_size"] == 2
    (out / "build_options.json").unlink()  # a build from before the record existed
    main(["build", "--random", "--out", str(out), "--reuse"])
    assert "wrote the random tiny Engram model" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["engram_max_ngram_size"] == 4


def test_build_is_byte_identical_and_cli_reports_sizes(model_dir, tmp_path, capsys):
    main(["build", "--random", "--out", str(tmp_path / "again")])
    printed = capsys.readouterr().out
    assert str((tmp_path / "again").resolve()) in printed
    for name in FILES:
        again = (tmp_path / "again" / name).read_bytes()
        assert again == (model_dir / name).read_bytes(), name
        assert f"{len(again):,} bytes" in printed
    build_tiny_model(tmp_path / "seed1", BuildOptions(seed=1))
    assert (tmp_path / "seed1/model.safetensors").read_bytes() != (
        model_dir / "model.safetensors"
    ).read_bytes()


def test_cli_generates_and_names_bad_options(model_dir, tmp_path, capsys):
    argv = ["generate", "--model", str(model_dir), "This License", "--max-new-tokens", "5"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("This License") and len(text.strip()) > len("This License")
    bad = ["build", "--random", "--out", str(tmp_path / "bad"), "--engram-layer-ids", "1", "5"]
    assert main(bad) == 2
    assert capsys.readouterr().err.startswith("error: engram_layer_ids [5] are not layers")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the asset's training corpus is not here")
def test_tokenizer_asset_is_reproducible(tmp_path, capsys):
    files = sorted(str(p) for p in CORPUS.iterdir() if p.is_file() and not p.is_symlink())
    main(["train-tokenizer", "--out", str(tmp_path / "tok.json"), *files])
    assert (tmp_path / "tok.json").read_bytes() == ASSET.read_bytes()


def test_layout_is_the_documented_one(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["architectures"] == ["EngramQwen3ForCausalLM"]
    assert cfg["model_type"] == "engram_qwen3"
    expected = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                    rms_norm_eps=1e-6, rope_theta=10000, max_position_embeddings=4096,
                    tie_word_embeddings=False, torch_dtype="bfloat16", hc_mult=1,
                    engram_variant="v41", engram_layer_ids=[1, 3], engram_max_ngram_size=4,
                    engram_n_heads=4, engram_head_dim=64)  # fmt: skip
    assert {k: cfg[k] for k in expected} == expected
    config = TinyEngramConfig.from_dict(cfg)
    assert list(config.spec.prime_sums) == cfg["engram_num_embeddings"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    assert len(tok) == cfg["vocab_size"] == 2000
    assert tok.pad_token_id == cfg["pad_token_id"] == cfg["engram_pad_token_id"]
    assert build_token_map(tok, cache=False)[1] == cfg["engram_compressed_vocab_size"]

    n_cols, hidden = (4 - 1) * 4, 128
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        for i in (1, 3):
            rows = cfg["engram_num_embeddings"][(1, 3).index(i)]
            e = f"model.layers.{i}.engram."
            assert f.get_slice(e + "embed.weight").get_shape() == [rows, 64]
            assert f.get_tensor(e + "embed.weight").dtype == torch.float8_e4m3fn
            assert f.get_tensor(e + "embed.scale").dtype == torch.float8_e8m0fnu
            assert f.get_slice(e + "embed.scale").get_shape() == [rows, 2]
            assert f.get_slice(e + "wkv.weight").get_shape() == [2 * hidden, n_cols * 64]
            assert f.get_slice(e + "q_weight").get_shape() == [1, hidden]
            assert f.get_slice(e + "k_weight").get_shape() == [1, hidden]
        dense = [n for n in names if ".engram.embed." not in n]
        assert all(f.get_tensor(n).dtype == torch.bfloat16 for n in dense)
    layer = [
        "input_layernorm.weight", "post_attention_layernorm.weight",
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    ]  # fmt: skip
    engram = ["embed.weight", "embed.scale", "wkv.weight", "q_weight", "k_weight"]
    want = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    want |= {f"model.layers.{i}.{w}" for i in range(4) for w in layer}
    want |= {f"model.layers.{i}.engram.{w}" for i in (1, 3) for w in engram}
    assert names == want


@pytest.mark.parametrize("placement", STORED)
def test_every_stored_placement_gives_identical_logits(model_dir, hbm_model, placement, tmp_path):
    prompt = _prompt(hbm_model.config)
    model = TinyEngramModel.from_pretrained(model_dir, placement, ssd_dir=tmp_path)
    try:
        assert torch.equal(model(prompt), hbm_model(prompt))
        columns = (4 - 1) * 4  # (N - 1) x heads
        assert all(
            t.counters.rows_requested == len(prompt) * columns for t in model.tables.values()
        )
    finally:
        model.close()


def test_off_changes_the_logits(model_dir, hbm_model):
    prompt = _prompt(hbm_model.config)
    model = TinyEngramModel.from_pretrained(model_dir, "off")
    off, on = model(prompt), hbm_model(prompt)
    # Every position moves: Engram also reads the unigram (and pad-blocked) rows.
    assert bool(((off - on).abs().amax(-1) > 0.05).all())
    assert all(t.counters.lookups == 0 for t in model.tables.values())


def _assert_greedy_under_full_recompute(model, prompt: list[int], tokens: list[int]) -> None:
    """Each of ``tokens`` is the argmax of a full recompute of its prefix, up to a tie:
    bf16 logits tie now and then (gap 0 or one ulp), and the incremental and full
    passes may then break the tie differently."""
    logits = model(prompt + tokens).float()
    for i, token in enumerate(tokens):
        row = logits[len(prompt) - 1 + i]
        assert row[token] >= row.max() - 2**-5, f"token {i}: not greedy under recompute"


def test_incremental_decoding_matches_full_recompute(hbm_model):
    prompt = _prompt(hbm_model.config)
    n = int(torch.randint(6, 12, ()))
    cached = hbm_model.generate(prompt, n)
    _assert_greedy_under_full_recompute(hbm_model, prompt, cached)
    assert 1 <= len(cached) <= n
    # Chunked forward (prefill in random pieces) gives the logits of one pass.
    seq = prompt + cached
    state, parts, start = hbm_model.new_state(), [], 0
    while start < len(seq):
        end = start + int(torch.randint(1, 6, ()))
        parts.append(hbm_model(seq[start:end], state))
        start = end
    # NOTE: bf16 hidden states round differently with other chunk shapes (a few ulps
    # that the layers carry on); a wrong cache or position moves logits by O(range).
    full = hbm_model(seq)
    scale = float(full.float().abs().max())
    torch.testing.assert_close(torch.cat(parts), full, atol=0.05 * scale, rtol=0.02)
    n1 = hbm_model.config.engram_max_ngram_size - 1
    assert state.length == len(seq) and state.tail.tolist() == seq[-n1:]


def test_paper_variant_decodes_incrementally(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    build_tiny_model(tmp_path / "paper", BuildOptions(engram_variant="paper"))
    model = TinyEngramModel.from_pretrained(tmp_path / "paper")
    off = TinyEngramModel.from_pretrained(tmp_path / "paper", "off")
    prompt = _prompt(model.config)
    assert not torch.equal(model(prompt), off(prompt))
    n = int(torch.randint(6, 12, ()))
    _assert_greedy_under_full_recompute(model, prompt, model.generate(prompt, n))


def test_config_round_trips(model_dir):
    text = (model_dir / "config.json").read_text()
    cfg = TinyEngramConfig.from_pretrained(model_dir)
    assert cfg.to_json() == text
    assert TinyEngramConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.kv_groups == 2 and cfg.q_size == 128 and cfg.kv_size == 64
    assert cfg.engram_index(3) == 1 and cfg.engram_index(2) is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.pop("engram_num_embeddings"), "missing engram_num_embeddings"),
        (
            lambda c: [c.pop(k) for k in list(c) if k.startswith("engram_")],
            "config has no usable Engram fields: missing engram_layer_ids",
        ),
        (lambda c: c.pop("engram_compressed_vocab_size"), "missing engram_compressed_vocab_size"),
        (lambda c: c.update(engram_variant="v5"), "unknown engram_variant 'v5'"),
        (lambda c: c.update(hc_mult=4), "hc_mult must be 1"),
        (lambda c: c.update(engram_layer_ids=[1, 7]), r"engram_layer_ids \[7\]"),
    ],
)
def test_bad_config_is_named(model_dir, tmp_path, edit, message):
    bad = tmp_path / "bad"
    shutil.copytree(model_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    edit(cfg)
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EngramConfigError, match=message):
        TinyEngramModel.from_pretrained(bad)


def test_wrong_compressed_vocab_is_named(model_dir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(model_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["engram_compressed_vocab_size"] += 1
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EngramConfigError, match="wrong tokenizer"):
        TinyEngramModel.from_pretrained(bad)
