"""How predictable a served model's row lookups are, prefill and decode apart: the share
of them that a frequency profile of other text covers.

For each backbone (``random``: ``build --random``, random weights; ``text``: ``build
--text-backbone``, the trained model with tables of the same size), with tables of about
``--table-gib`` GiB: build the model (or reuse it), profile the benchmark text's *train*
split (``engram_testing.bench_text``: a pinned package's sources) through its hash (``python -m engram.profile ... --top N``, N =
``--top-fraction`` of the largest table's rows, as a seeded RAM cache of that share
holds), then greedily decode ``--new-tokens`` tokens after each of ``--prompts``
held-out prompts of ``--prompt-tokens`` tokens (the first tokens of the pieces of the
held-out text that ``bench_serving_tiers.py``'s prompts are cut from), past an end of text
as the benchmark's ``ignore_eos`` does, on the core
library's reference model on the CPU. Reports per backbone the distinct token ids among
the generated tokens, the start of a few continuations, and the share of row lookups that
the profile covers, in three phases: the prompts' (``prefill``), the generated tokens'
(``decode``: every new token but the last, which no step reads) and, for reference, those
of the held-out text's own next tokens after each prompt (``heldout_next``: what a model
that writes this text exactly would look up). Every token's every hash column counts as
one lookup (``coverage``); ``distinct_coverage`` counts each request's distinct rows once,
so that a greedy loop repeating its rows weighs no more than once. A last line of JSON.

    python benchmark/decode_coverage.py --table-gib 0.5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from engram_testing.bench_text import bench_text
from engram_testing.tiers.seed_profile import ensure_profile
from engram_testing.tiers.servers import build_model, tokenizer_of
from engram_testing.tiers.workload import heldout_ids

from engram.cli import Parser, number, run
from engram.cli_paths import directory
from engram.model import TinyEngramConfig, TinyEngramModel
from engram.model.tokenizer import load_tokenizer
from engram.profile.file import layer_rows

ROOT = Path(__file__).resolve().parents[1]
BACKBONES = ("random", "text")
SHOWN_CONTINUATIONS = 3
PHASES = ("prefill", "decode", "heldout_next")


def greedy(model: TinyEngramModel, prompt: list[int], new_tokens: int) -> list[int]:
    """``new_tokens`` greedy tokens after ``prompt``, an end of text included and passed
    (a server asked to ignore it does the same)."""
    state = model.new_state()
    logits = model.forward(prompt, state)
    out: list[int] = []
    while True:
        out.append(int(logits[-1].argmax()))
        if len(out) == new_tokens:
            return out
        logits = model.forward([out[-1]], state)


class Coverage:
    """Lookups of one phase whose row the profile holds: every (token, hash column)
    lookup, and each request's distinct rows once (a greedy loop repeats its rows)."""

    def __init__(self, hot: list[np.ndarray]):
        self.hot = hot
        self.hits = self.lookups = self.distinct_hits = self.distinct = 0

    def add(self, rows: torch.Tensor) -> None:
        """One request's ``rows`` [T, layers, columns] of this phase."""
        for i, hot in enumerate(self.hot):
            ids = rows[:, i].reshape(-1).numpy()
            unique = np.unique(ids)
            self.hits += _held(hot, ids)
            self.lookups += ids.size
            self.distinct_hits += _held(hot, unique)
            self.distinct += unique.size

    def figures(self) -> dict[str, float | int]:
        return {
            "coverage": self.hits / self.lookups,
            "distinct_coverage": self.distinct_hits / self.distinct,
            "lookups": self.lookups,
        }


def _held(hot: np.ndarray, ids: np.ndarray) -> int:
    """How many of ``ids`` are in ``hot`` (sorted)."""
    if not hot.size:
        return 0
    at = np.searchsorted(hot, ids).clip(max=hot.size - 1)
    return int((hot[at] == ids).sum())


def model_path(backbone: str, args: argparse.Namespace) -> Path:
    return args.work / f"{backbone}-{args.table_gib:g}g"


def measure(backbone: str, args: argparse.Namespace) -> dict:
    model_dir = build_model(args.table_gib, model_path(backbone, args), backbone)
    cfg = TinyEngramConfig.from_pretrained(model_dir)
    top = int(np.ceil(max(cfg.engram_num_embeddings) * args.top_fraction))
    path = ensure_profile(
        model_dir, model_dir.with_name(model_dir.name + "-train.npz"), top, quiet=True
    )
    hot = [np.sort(layer_rows(path, layer)) for layer in cfg.engram_layer_ids]
    tokenizer = load_tokenizer(model_dir)
    n = args.prompt_tokens
    pieces = heldout_ids(model_dir, n + args.new_tokens, args.prompts)
    model = TinyEngramModel.from_pretrained(model_dir, "hbm", device="cpu")
    phases = {p: Coverage(hot) for p in PHASES}
    generated, texts = [], []
    try:
        for piece in pieces:
            new = greedy(model, piece[:n], args.new_tokens)
            generated += new
            texts.append(tokenizer.decode(new))
            # NOTE: the last new token is sampled, never fed back: no step looks it up.
            rows = model.hasher.hash(torch.tensor(piece[:n] + new[:-1]))
            phases["prefill"].add(rows[:n])
            phases["decode"].add(rows[n:])
            phases["heldout_next"].add(model.hasher.hash(torch.tensor(piece[:-1]))[n:])
    finally:
        model.close()
    return {
        "model": str(model_dir),
        "table_rows": list(cfg.engram_num_embeddings),
        "profile_top": top,
        "generated_tokens": len(generated),
        "distinct_generated_ids": len(set(generated)),
        "vocab_size": cfg.vocab_size,
        **{phase: c.figures() for phase, c in phases.items()},
        "continuations": texts[:SHOWN_CONTINUATIONS],
    }


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark/decode_coverage.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--table-gib", type=number(float, above=0), default=0.5, help="the tables' size in all"
    )
    p.add_argument(
        "--backbones",
        nargs="+",
        choices=BACKBONES,
        default=list(BACKBONES),
        help="random: random weights; text: the trained model with tables of that size",
    )
    p.add_argument("--prompts", type=number(at_least=1), default=20, help="held-out prompts")
    p.add_argument("--prompt-tokens", type=number(at_least=1), default=256, help="per prompt")
    p.add_argument("--new-tokens", type=number(at_least=2), default=64, help="per prompt")
    p.add_argument(
        "--top-fraction",
        type=number(float, above=0),
        default=1 / 16,
        help="profile rows kept, as a share of the largest table's rows",
    )
    p.add_argument(
        "--work",
        type=directory,
        default=ROOT / "out" / "decode_coverage",
        help="models and profiles (reused when current)",
    )
    return p


def main(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    # NOTE: a request for more prompts than the held-out text gives fails before any build
    for backbone in args.backbones:
        tokenizer = tokenizer_of(model_path(backbone, args), backbone)
        heldout_ids(tokenizer, args.prompt_tokens + args.new_tokens, args.prompts)
    text = {split: bench_text(split) for split in ("heldout", "train")}
    print(f"prompts: {text['heldout'].describe()}", flush=True)
    print(f"profile text: {text['train'].describe()}", flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    results = {b: measure(b, args) for b in args.backbones}
    for name, r in results.items():
        print(
            f"{name}: {r['distinct_generated_ids']:,} distinct ids in {r['generated_tokens']:,} "
            "generated tokens; the profile covers (all lookups / each request's distinct "
            "rows) "
            + ", ".join(
                f"{p} {r[p]['coverage']:.3f} / {r[p]['distinct_coverage']:.3f}" for p in PHASES
            )
        )
        for continuation in r["continuations"]:
            print(f"    {continuation[:160]!r}")
    settings = {k: getattr(args, k) for k in ("table_gib", "prompts", "prompt_tokens")}
    settings |= {"new_tokens": args.new_tokens, "top_fraction": args.top_fraction}
    records = {split: t.record() for split, t in text.items()}
    print(json.dumps({"settings": settings, "text": records, "backbones": results}))


if __name__ == "__main__":
    options = parser().parse_args()
    sys.exit(run(lambda: main(options), options))
