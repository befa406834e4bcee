"""Real-text prompts for ``bench_serving_tiers.py`` and the RAM-cache curve they give.

Prompts are the held-out split of the benchmark text (:mod:`engram_testing.bench_text`:
a pinned package's sources, the same on every machine), cut into consecutive pieces and sent
as token ids through ``sglang.benchmark.serving``'s ``random`` dataset, which reads
prompts from a ShareGPT-style file (``--dataset-path``), tokenizes them with the
model's tokenizer and cuts each to its drawn input length (``--tokenize-prompt`` sends
the ids). Each run (a concurrency in a repeat) gets its own file of pieces no other run
uses, so a server's RAM cache is warm only from other text, as in a deployment.

:func:`served_prompts` asks SGLang's own sampler for the ids it sends (same seed, same
file), and :func:`prompt_rows` gives the rows their prefills look up
(:mod:`engram_testing.tiers.cache_curve` replays them through the RAM cache).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch

from engram.hashing import NgramHasher
from engram.model.config import TinyEngramConfig
from engram.model.tokenizer import load_tokenizer
from engram.token_map import build_token_map
from engram_testing.bench_text import bench_text, too_little

SLACK_TOKENS = 48  # a piece is this much longer than the prompt it must give
PIECE_SEED = 17


def heldout_ids(
    tokenizer: Path, size: int, count: int | None = None, what: str = ""
) -> list[list[int]]:
    """The held-out benchmark text, tokenized by ``tokenizer`` (a model directory or a
    ``tokenizer.json``), cut into consecutive pieces of ``size`` tokens, in a fixed shuffled
    order; the first ``count`` (when there are fewer, an error naming how many ``what``
    there are), or all."""
    tokenizer = _tokenizer(tokenizer)
    text = bench_text("heldout")
    pieces = []
    for encoding in tokenizer.encode_batch(list(text.texts)):
        ids = encoding.ids
        pieces += [ids[i : i + size] for i in range(0, len(ids) - size, size)]
    random.Random(PIECE_SEED).shuffle(pieces)
    if count is None:
        return pieces
    if len(pieces) < count:
        raise too_little(what or f"prompts of {size} tokens", len(pieces), count, text)
    return pieces[:count]


def _tokenizer(source: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(source)) if source.is_file() else load_tokenizer(source)


def prompt_pieces(tokenizer: Path, tokens: int, count: int) -> list[list[int]]:
    """The ``count`` pieces that prompts of ``tokens`` tokens are cut from (each
    ``SLACK_TOKENS`` longer)."""
    return heldout_ids(tokenizer, tokens + SLACK_TOKENS, count, f"prompts of {tokens} tokens")


def heldout_pieces(model_dir: Path, tokens: int, count: int) -> list[str]:
    """:func:`prompt_pieces` as text."""
    tokenizer = load_tokenizer(model_dir)
    return [tokenizer.decode(ids) for ids in prompt_pieces(model_dir, tokens, count)]


def write_datasets(
    model_dir: Path, work: Path, counts: dict[str, int], input_len: int
) -> dict[str, Path]:
    """One ShareGPT-style file per label (a concurrency, a repeat) with ``counts[label]``
    pieces no other label gets."""
    pieces = heldout_pieces(model_dir, input_len, sum(counts.values()))
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
