"""Served tokens against the reference model (``engram.model``), teacher-forced.

A server's greedy tokens are checked one by one: the reference model runs the prompt
plus the server's own tokens in one pass, with Engram on where the regime says, and each
served token must be the reference's argmax at its position, or within ``tie`` of it.
Comparing greedy strings instead would fail at the first exact bf16 tie (two logits of
10.25 are common in the tiny model) and compare nothing after it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from engram.eval.regimes import REGIMES
from engram.model import TinyEngramModel

# NOTE: the server's bf16 logits come from other kernels and another reduction order
# than the reference's; a token within this many logits of the reference's best (a
# bf16 ulp at the tiny model's logit scale is 0.0625) still counts as agreeing.
TIE = 0.13


@dataclass(frozen=True)
class Agreement:
    exact: int  # served token is the reference argmax
    within_tie: int  # ... or within TIE of it
    total: int
    worst_gap: float  # the largest (best logit - served token's logit)

    @property
    def all_agree(self) -> bool:
        return self.within_tie == self.total


def load_reference(model_dir: Path) -> TinyEngramModel:
    return TinyEngramModel.from_pretrained(model_dir, placement="dram")


def agreement(
    model: TinyEngramModel, prompt: list[int], served: list[int], regime: str = "both"
) -> Agreement:
    """How many of ``served`` (the server's greedy continuation of ``prompt``) the
    reference model agrees with, teacher-forced on ``served`` under ``regime``."""
    inputs = [*prompt, *served[:-1]]
    mask = REGIMES[regime].mask(len(prompt), len(served) - 1)
    logits = model.forward(inputs, None, mask)[len(prompt) - 1 :]
    best = logits.max(dim=-1).values
    got = logits.gather(1, torch.tensor(served).unsqueeze(1)).squeeze(1)
    gaps = best - got
    return Agreement(
        exact=int((gaps == 0).sum()),
        within_tie=int((gaps <= TIE).sum()),
        total=len(served),
        worst_gap=float(gaps.max()),
    )


def agreement_all(
    model: TinyEngramModel,
    prompts: list[list[int]],
    served: list[list[int]],
    regime: str = "both",
) -> Agreement:
    """:func:`agreement` summed over requests (``served[i]`` continues ``prompts[i]``)."""
    parts = [agreement(model, p, s, regime) for p, s in zip(prompts, served, strict=True)]
    return Agreement(
        exact=sum(a.exact for a in parts),
        within_tie=sum(a.within_tie for a in parts),
        total=sum(a.total for a in parts),
        worst_gap=max(a.worst_gap for a in parts),
    )


def random_prompts(model: TinyEngramModel, n: int, rng: random.Random) -> list[list[int]]:
    """``n`` prompts of 6-40 ids drawn fresh from the tokenizer's ordinary tokens (ids
    past the special tokens), so every run hashes other n-grams."""
    vocab = model.config.vocab_size
    return [[rng.randrange(8, vocab) for _ in range(rng.randint(6, 40))] for _ in range(n)]
