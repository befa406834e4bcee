"""Admission prefetch: a queued prompt's SSD rows are read before its prefill looks them up."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from sglang_engram import admission, table_registry

from engram.fp8 import quantize_rows
from engram.tables import create_table
from test.core.test_hashing import random_hasher


def test_admitted_prompt_rows_come_from_the_prefetch(tmp_path: Path) -> None:
    hasher = random_hasher(random.Random())
    spec = hasher.spec
    tables, references = [], []
    for i, layer in enumerate(spec.layer_ids):
        weight, scale = quantize_rows(torch.randn(spec.num_embeddings[i], spec.head_dim))
        tables.append(
            create_table("ssd", weight, scale, path=tmp_path / f"l{layer}", hot_cache_bytes=1 << 16)
        )
        references.append(create_table("dram", weight, scale))
    table_registry.clear()
    try:
        for layer, table in zip(spec.layer_ids, tables, strict=True):
            table_registry.add(layer, table)
        prompt = torch.randint(0, hasher.vocab_size, (200,))
        assert admission.prefetch_prompt(prompt.tolist()) == 0  # no hasher registered yet
        table_registry.set_hasher(hasher)
        assert admission.prefetch_prompt(prompt.tolist()) == spec.n_layers
        row_ids = hasher.hash(prompt)
        for i, (table, ref) in enumerate(zip(tables, references, strict=True)):
            got = table.lookup(row_ids[:, i])
            assert torch.equal(got.view(torch.int16), ref.lookup(row_ids[:, i]).view(torch.int16))
            assert table.stats()["prefetch_hits"] == torch.unique(row_ids[:, i]).numel()
    finally:
        table_registry.clear()
        for table in tables:
            table.close()
