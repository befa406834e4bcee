"""engram.eval gate-scan: every position of every Engram layer is counted once, under the
n-gram ending there, with the gate the layer applied."""

from __future__ import annotations

import json

import torch

from engram.eval import gate_scan
from engram.eval.__main__ import main
from engram.layer import v41_gate_values


def _segments(cfg, n: int = 3) -> list[list[int]]:
    # NOTE: a two-token alphabet makes n-grams repeat, so groups hold several positions.
    alphabet = torch.randperm(cfg.vocab_size - 3)[:2] + 3
    return [
        alphabet[torch.randint(0, 2, (int(torch.randint(10, 40, ())),))].tolist() for _ in range(n)
    ]


def test_counts_add_up_to_the_positions_scanned(tiny, tokenizer):
    segs = _segments(tiny.config)
    scan = gate_scan(tiny, tokenizer, segs)
    assert scan.positions == sum(len(s) for s in segs)
    rows = scan.top(k=None, min_count=1)
    assert set(rows) == set(tiny.config.engram_layer_ids)
    for layer_rows in rows.values():
        assert sum(r.count for r in layer_rows) == scan.positions
        assert any(r.count > 1 for r in layer_rows)
        assert all(0.0 < r.mean_gate < 1.0 for r in layer_rows)
        means = [r.mean_gate for r in layer_rows]
        assert means == sorted(means, reverse=True)


def test_recorded_gate_is_the_one_the_layer_applies(tiny, tokenizer):
    """A segment of distinct tokens: every group is one position, so its mean gate is that
    position's gate; recompute it from the layer's own input and wkv output."""
    seg = torch.randperm(tiny.config.vocab_size - 3)[:12].add(3).tolist()
    scan = gate_scan(tiny, tokenizer, [seg])
    layer_id = tiny.config.engram_layer_ids[0]
    module = tiny.model.layers[layer_id].engram
    seen = {}
    handle = module.register_forward_pre_hook(lambda m, args: seen.update(x=args[0], r=args[1]))
    try:
        tiny.forward(seg)
    finally:
        handle.remove()
    with torch.no_grad():
        rows = module.table.lookup(seen["r"]).flatten(-2).to(module.wkv.weight.dtype)
        kv = module.wkv(rows)
        gates = v41_gate_values(seen["x"], kv, module.q_weight, module.k_weight, module.config.eps)
    window = tiny.hasher.window
    for t in range(len(seg)):
        text = tokenizer.decode(seg[max(0, t - window + 1) : t + 1])
        total, count = scan.groups[layer_id][text]
        assert count == 1 and total == float(gates[t, 0])
    assert not module._forward_pre_hooks and not module.wkv._forward_hooks


def test_cli_lists_the_strongest_ngrams(tiny_dir, tmp_path, capsys):
    data = tmp_path / "doc.py"
    data.write_text("for i in range(10):\n    total += i\n" * 30)
    out = tmp_path / "scan.json"
    main(
        [
            "gate-scan",
            "--model",
            str(tiny_dir),
            "--data",
            str(data),
            "--top",
            "3",
            "--min-count",
            "2",
            "--json",
            str(out),
        ]
    )
    result = json.loads(out.read_text())
    captured = capsys.readouterr()
    printed = captured.out
    assert "gate-scan: 100%" in captured.err  # the progress bar, one line per redraw
    assert result["positions"] > 0 and f"{result['positions']} positions" in printed
    for rows in result["layers"].values():
        assert 0 < len(rows) <= 3
        assert all(r["count"] >= 2 for r in rows)
        assert all(repr(r["ngram"]) in printed for r in rows)
