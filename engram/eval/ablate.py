"""What switching Engram off costs, per phase, measured on the reference model.

For every sample and regime, with the Engram layers on or off per position as the regime
says: one teacher-forced pass over prompt + continuation gives the continuation's loss in
bits/token, and greedy decoding after the prompt the exact match of its first ``k`` tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from engram.errors import EngramInputError
from engram.eval.regimes import REGIMES, Regime
from engram.eval.samples import Sample
from engram.model.modeling import TinyEngramModel
from engram.progress import progress_bar


@dataclass(frozen=True)
class RegimeScore:
    bits_per_token: float
    exact_match: float


@dataclass(frozen=True)
class Ablation:
    regimes: dict[str, RegimeScore]
    tokens: int
    samples: int
    k: int

    def to_json(self) -> dict[str, object]:
        return {
            "regimes": {
                name: {"bits_per_token": s.bits_per_token, "exact_match": s.exact_match}
                for name, s in self.regimes.items()
            },
            "tokens": self.tokens,
            "samples": self.samples,
            "k": self.k,
        }

    def table(self) -> str:
        lines = [f"{'regime':<14}{'bits/token':>12}{f'exact@{self.k}':>12}"]
        for name, s in self.regimes.items():
            lines.append(f"{name:<14}{s.bits_per_token:>12.4f}{s.exact_match:>12.3f}")
        lines.append(f"{self.samples} samples, {self.tokens} continuation tokens")
        return "\n".join(lines)


def score_sample(
    model: TinyEngramModel, sample: Sample, regime: Regime, k: int
) -> tuple[float, int, bool]:
    """(continuation loss in nats, its tokens, greedy exact match of its first k)."""
    p, c = len(sample.prompt), len(sample.continuation)
    logits = model.forward(sample.ids, None, regime.mask(p, c))[p - 1 : p + c - 1]
    target = torch.tensor(sample.continuation, device=logits.device)
    nats = float(F.cross_entropy(logits, target, reduction="sum"))
    # NOTE: decoded step by step through the KV cache, as a server does: a teacher-forced
    # argmax can differ from it where two logits nearly tie. A continuation shorter than k
    # is compared over its length.
    n = min(k, c)
    greedy = model.generate(
        sample.prompt, n, prefill_engram=regime.prefill, decode_engram=regime.decode
    )
    return nats, c, greedy == sample.continuation[:n]


def ablate(
    model: TinyEngramModel,
    samples: Sequence[Sample],
    k: int = 8,
    regimes: Mapping[str, Regime] = REGIMES,
    show_progress: bool = False,
) -> Ablation:
    if k < 1:
        raise EngramInputError(f"the exact-match length k must be at least 1, got {k}")
    scores = {}
    tokens = sum(len(s.continuation) for s in samples)
    steps = len(regimes) * len(samples)
    with progress_bar(steps, "ablate", unit="sample", show=show_progress) as bar:
        for name, regime in regimes.items():
            nats, matches = 0.0, 0
            for sample in samples:
                loss, _, match = score_sample(model, sample, regime, k)
                nats, matches = nats + loss, matches + match
                bar.update()
            scores[name] = RegimeScore(nats / tokens / math.log(2.0), matches / len(samples))
    return Ablation(scores, tokens, len(samples), k)
