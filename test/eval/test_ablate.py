"""engram.eval ablate: the four regimes follow their masks, results do not depend on the
placement, bad input gets one clear line."""

from __future__ import annotations

import json
import re

import pytest
import torch

from engram.errors import EngramInputError
from engram.eval import REGIMES, Sample, SampleOptions, ablate, make_samples
from engram.eval.__main__ import main
from engram.eval.ablate import score_sample
from engram.eval.loading import open_model
from engram.model.corpus import Document


def _samples(cfg, n: int = 3) -> list[Sample]:
    out = []
    for _ in range(n):
        p, c = (int(v) for v in torch.randint(4, 24, (2,)))
        ids = torch.randint(3, cfg.vocab_size, (p + c,)).tolist()
        out.append(Sample(ids[:p], ids[p:]))
    return out


def test_none_equals_the_model_without_engram_layers(tiny, tiny_dir):
    with open_model(tiny_dir, "hbm") as bare:
        for layer in bare.model.layers:
            layer.engram = None
        for sample in _samples(tiny.config):
            ids, p, c = sample.ids, len(sample.prompt), len(sample.continuation)
            none = tiny.forward(ids, None, REGIMES["none"].mask(p, c))
            assert torch.equal(none, bare.forward(ids))
            assert not torch.equal(none, tiny.forward(ids))
            assert score_sample(tiny, sample, REGIMES["none"], 4) == score_sample(
                bare, sample, REGIMES["both"], 4
            )


def test_regimes_switch_engram_by_phase(tiny):
    for sample in _samples(tiny.config):
        p, c = len(sample.prompt), len(sample.continuation)
        logits = {n: tiny.forward(sample.ids, None, r.mask(p, c)) for n, r in REGIMES.items()}
        # causal: the prompt's positions only see the prefill phase's choice
        assert torch.equal(logits["prefill_only"][:p], logits["both"][:p])
        assert torch.equal(logits["decode_only"][:p], logits["none"][:p])
        # the continuation sees both phases: every regime differs there
        cont = [logits[n][p:] for n in REGIMES]
        assert all(not torch.equal(a, b) for i, a in enumerate(cont) for b in cont[i + 1 :])


def test_prefill_only_with_an_empty_continuation_equals_both(tiny):
    prompt = _samples(tiny.config, 1)[0].prompt
    both, prefill = tiny.new_state(), tiny.new_state()
    expected = tiny.forward(prompt, both)
    got = tiny.forward(prompt, prefill, REGIMES["prefill_only"].mask(len(prompt), 0))
    assert torch.equal(got, expected)
    for a, b in zip(both.layers, prefill.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_teacher_forced_regime_is_what_a_pd_deployment_decodes(tiny):
    """prefill with Engram, decode without, through the KV cache: the same logits as the
    one pass under the prefill_only mask."""
    sample = _samples(tiny.config, 1)[0]
    p, c = len(sample.prompt), len(sample.continuation)
    state = tiny.new_state()
    split = torch.cat(
        [tiny.forward(sample.prompt, state, True)]
        + [tiny.forward([t], state, False) for t in sample.continuation]
    )
    one_pass = tiny.forward(sample.ids, None, REGIMES["prefill_only"].mask(p, c))
    torch.testing.assert_close(split, one_pass, atol=0.05, rtol=0.02)


def test_results_are_identical_in_every_placement(tiny_dir, tokenizer, tmp_path):
    docs = [Document("a", "def f(x):\n    return x + 1\n" * 20)]
    samples = make_samples(tokenizer, docs, SampleOptions(0.5, 32, 4))
    results = {}
    for placement in ("hbm", "dram", "ssd"):
        with open_model(tiny_dir, placement, tmp_path / placement) as model:
            results[placement] = ablate(model, samples, k=4).to_json()
    assert results["hbm"] == results["dram"] == results["ssd"]


def test_cli_writes_the_table_and_json(tiny_dir, tmp_path, capsys):
    data = tmp_path / "doc.py"
    data.write_text("import os\n\n\ndef main():\n    print(os.getcwd())\n" * 10)
    out = tmp_path / "ablate.json"
    main(
        [
            "ablate",
            "--model",
            str(tiny_dir),
            "--data",
            str(data),
            "--max-samples",
            "3",
            "--seq-len",
            "32",
            "--k",
            "4",
            "--json",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    printed = captured.out
    result = json.loads(out.read_text())
    # The progress bar on stderr counts regimes x samples (plain lines off a terminal).
    steps = len(REGIMES) * 3
    assert "ablate: 100%" in captured.err and f"{steps}/{steps}" in captured.err
    assert set(result["regimes"]) == set(REGIMES)
    for name, score in result["regimes"].items():
        assert set(score) == {"bits_per_token", "exact_match"} and score["bits_per_token"] > 0
        assert f"{score['bits_per_token']:.4f}" in printed and name in printed
    assert result["tokens"] > 0 and result["samples"] == 3


@pytest.mark.parametrize("frac", ["0", "1", "1.5", "-0.2", "nan"])
def test_prompt_frac_outside_the_open_interval_is_named(tiny_dir, frac, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["ablate", "--model", str(tiny_dir), "--prompt-frac", frac])
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        f"error: argument --prompt-frac: must be a number > 0 and < 1, not {frac!r}; see "
        "python -m engram.eval ablate --help\n"
    )
    with pytest.raises(EngramInputError, match=r"^--prompt-frac must be inside \(0, 1\)"):
        SampleOptions(prompt_frac=float(frac))  # the library checks it too


def test_model_without_engram_layers_is_named(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    for command in ("ablate", "gate-scan"):
        assert main([command, "--model", str(tmp_path)]) == 2
        assert re.match(r"^error: .* has no Engram layers", capsys.readouterr().err)


def test_corpus_that_tokenizes_to_nothing_is_named(tiny_dir, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    assert main(["ablate", "--model", str(tiny_dir), "--data", str(tmp_path / "empty.txt")]) == 2
    assert capsys.readouterr().err.startswith("error: the data tokenizes to nothing")
