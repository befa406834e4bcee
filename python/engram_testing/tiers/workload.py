"""Real-text prompts for ``bench_serving_tiers.py`` and the RAM-cache curve they give.

Prompts are held-out Python source of this interpreter's standard library (the split
``engram.model.corpus`` keeps out of training), cut into consecutive pieces and sent
as token ids through ``sglang.benchmark.serving``'s ``random`` dataset, which reads
prompts from a ShareGPT-style file (``--dataset-path``), tokenizes them with the
model's tokenizer and cuts each to its drawn input length (``--tokenize-prompt`` sends
the ids). Each run (a concurrency in a repeat) gets its own file of pieces no other run
uses, so a server's RAM cache is warm only from other text, as in a deployment.

:func:`served_prompts` asks SGLang's own sampler for the ids it sends (same seed, same
file), and :func:`cache_curve` replays their rows through the RAM cache's index
(:class:`engram.ssd.row_cache.RowCache`'s set-associative LRU) at several cache sizes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engram.hashing import NgramHasher
from engram.model.config import TinyEngramConfig
from engram.model.corpus import split_documents, stdlib_documents
from engram.model.tokenizer import load_tokenizer
from engram.ssd.row_cache import RowCache
from engram.token_map import build_token_map

SLACK_TOKENS = 48  # a piece is this much longer than the prompt it must give
PIECE_SEED = 17


def heldout_ids(model_dir: Path, size: int) -> list[list[int]]:
    """Held-out stdlib ``.py`` sources, tokenized, cut into consecutive pieces of
    ``size`` tokens, in a fixed shuffled order."""
    tokenizer = load_tokenizer(model_dir)
    docs = [d for d in split_documents(stdlib_documents(), "heldout") if d.name.endswith(".py")]
    pieces = []
    for encoding in tokenizer.encode_batch([d.text for d in docs]):
        ids = encoding.ids
        pieces += [ids[i : i + size] for i in range(0, len(ids) - size, size)]
    random.Random(PIECE_SEED).shuffle(pieces)
    return pieces


def heldout_pieces(model_dir: Path, tokens: int) -> list[str]:
    """:func:`heldout_ids` pieces of ``tokens + SLACK_TOKENS`` tokens, as text."""
    tokenizer = load_tokenizer(model_dir)
    return [tokenizer.decode(ids) for ids in heldout_ids(model_dir, tokens + SLACK_TOKENS)]


def write_datasets(
    model_dir: Path, work: Path, counts: dict[str, int], input_len: int
) -> dict[str, Path]:
    """One ShareGPT-style file per label (a concurrency, a repeat) with ``counts[label]``
    pieces no other label gets."""
    pieces = heldout_pieces(model_dir, input_len)
    need = sum(counts.values())
    if len(pieces) < need:
        raise SystemExit(
            f"error: the held-out stdlib sources give {len(pieces)} prompts of "
            f"{input_len} tokens, {need} are needed; ask for fewer or shorter prompts"
        )
    files, start = {}, 0
    for label, n in counts.items():
        rows = [
            {"conversations": [{"value": text}, {"value": "(continuation)"}]}
            for text in pieces[start : start + n]
        ]
        start += n
        files[label] = work / f"prompts_{label}.json"
        files[label].write_text(json.dumps(rows))
    return files


def served_prompts(
    dataset: Path, model_dir: Path, num_prompts: int, input_len: int, output_len: int,
    range_ratio: float, seed: int,
) -> list[list[int]]:  # fmt: skip
    """The token ids ``sglang.benchmark.serving --dataset-name random --dataset-path
    DATASET --tokenize-prompt --seed SEED ...`` sends, in its order: its own sampler,
    seeded as the benchmark seeds it."""
    from sglang.benchmark.datasets.random import sample_random_requests
    from sglang.benchmark.utils import get_tokenizer

    random.seed(seed)
    np.random.seed(seed)
    rows = sample_random_requests(
        input_len=input_len,
        output_len=output_len,
        num_prompts=num_prompts,
        range_ratio=range_ratio,
        tokenizer=get_tokenizer(str(model_dir)),
        dataset_path=str(dataset),
        random_sample=True,
        return_text=False,
    )
    return [list(r.prompt) for r in rows]


def model_hasher(model_dir: Path) -> tuple[NgramHasher, TinyEngramConfig]:
    cfg = TinyEngramConfig.from_pretrained(model_dir)
    token_map, _ = build_token_map(load_tokenizer(model_dir))
    return NgramHasher(cfg.spec, token_map, cfg.engram_pad_token_id), cfg


def prompt_rows(model_dir: Path, prompts: list[list[int]]) -> list[list[np.ndarray]]:
    """Per prompt, per Engram layer: the row ids its prefill looks up (duplicates kept)."""
    hasher, cfg = model_hasher(model_dir)
    out = []
    for ids in prompts:
        rows = hasher.hash(torch.tensor(ids, dtype=torch.int64))  # [T, layers, cols]
        out.append([rows[:, i].reshape(-1).numpy() for i in range(len(cfg.engram_layer_ids))])
    return out


def cache_curve(
    model_dir: Path, prompts: list[list[int]], fractions: list[float]
) -> dict[str, Any]:
    """RAM-cache hit ratio of the prompts' rows, replayed in order (one lookup per
    prompt and layer, as a prefill reads them) through one ``RowCache`` per table of
    ``fraction`` x that table's bytes; and the unbounded cache's ratio (every repeat a
    hit) that bounds them. Hits and misses count distinct rows per lookup, as the
    server's counters do."""
    _, cfg = model_hasher(model_dir)
    rows = prompt_rows(model_dir, prompts)
    row_bytes = cfg.spec.row_bytes
    lookups = [np.unique(layer) for prompt in rows for layer in prompt]
    layer_of = [i for _ in rows for i in range(len(cfg.engram_layer_ids))]
    total = sum(u.size for u in lookups)
    seen: list[set[int]] = [set() for _ in cfg.engram_layer_ids]
    repeats = 0
    for layer, ids in zip(layer_of, lookups, strict=True):
        before = len(seen[layer])
        seen[layer].update(ids.tolist())
        repeats += ids.size - (len(seen[layer]) - before)
    points = []
    for fraction in fractions:
        # NOTE: RowCache itself and its take/put steps (take the hits, then admit what
        # missed), with one-byte rows: a cache of half an 8 GiB table would hold 4 GiB.
        caches = [
            RowCache(max(1, int(fraction * n * row_bytes) // row_bytes), 1)
            for n in cfg.engram_num_embeddings
        ]
        hits = 0
        for layer, ids in zip(layer_of, lookups, strict=True):
            need = np.ones(ids.size, dtype=bool)
            rows = np.zeros((ids.size, 1), dtype=np.uint8)
            missed = np.empty(ids.size, dtype=np.int64)
            took, misses = caches[layer].take(ids, need, rows, missed)
            hits += took
            caches[layer].put(ids[missed[:misses]], rows, missed[:misses])
        points.append({"fraction": fraction, "hit_ratio": hits / total})
        del caches
    unbounded = repeats / total
    return {
        "points": points,
        "unbounded_hit_ratio": unbounded,
        "distinct_rows": sum(len(s) for s in seen),
        "row_lookups": total,
        "fraction_for_90pct_of_hits": _fraction_for(points, 0.9 * unbounded),
    }


def _fraction_for(points: list[dict[str, float]], target: float) -> float | None:
    """The smallest cache fraction whose hit ratio reaches ``target`` (log-linear
    interpolation between measured sizes); None if none does."""
    previous = None
    for p in points:
        if p["hit_ratio"] >= target:
            if previous is None or p["hit_ratio"] == previous["hit_ratio"]:
                return p["fraction"]
            share = (target - previous["hit_ratio"]) / (p["hit_ratio"] - previous["hit_ratio"])
            lo, hi = np.log2(previous["fraction"]), np.log2(p["fraction"])
            return float(2 ** (lo + share * (hi - lo)))
        previous = p
    return None
