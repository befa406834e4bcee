"""Evaluation samples: documents cut into segments, each a prompt and its continuation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engram.errors import EngramInputError
from engram.model.corpus import (
    Document,
    encode_documents,
    file_documents,
    split_documents,
    stdlib_documents,
)


@dataclass(frozen=True)
class Sample:
    prompt: list[int]
    continuation: list[int]

    @property
    def ids(self) -> list[int]:
        return self.prompt + self.continuation


@dataclass(frozen=True)
class SampleOptions:
    """How documents become samples."""

    prompt_frac: float = 0.5
    seq_len: int = 128
    max_samples: int = 200

    def __post_init__(self) -> None:
        if not 0.0 < self.prompt_frac < 1.0:
            raise EngramInputError(f"--prompt-frac must be inside (0, 1), got {self.prompt_frac}")
        if self.seq_len < 2 or self.max_samples < 1:
            raise EngramInputError(
                f"--seq-len must be >= 2 and --max-samples >= 1, got {self.seq_len} and "
                f"{self.max_samples}"
            )


def load_documents(data: Sequence[str | Path] | None) -> list[Document]:
    """The given text files, or by default the held-out split of the stdlib corpus (the
    documents training never saw)."""
    if data:
        return file_documents(data)
    return split_documents(stdlib_documents(), "heldout")


def segments(
    tokenizer: object, docs: Sequence[Document], seq_len: int, max_segments: int
) -> list[list[int]]:
    """Each document's consecutive ``seq_len``-token segments (a shorter last one kept if it
    holds two tokens); at most ``max_segments``, evenly spread over all of them."""
    segs = [
        ids[i : i + seq_len]
        for ids in encode_documents(tokenizer, docs)
        for i in range(0, len(ids), seq_len)
        if len(ids) - i >= 2
    ]
    if not segs:
        raise EngramInputError("the data tokenizes to nothing: no document has two tokens")
    if len(segs) > max_segments:
        step = len(segs) / max_segments
        segs = [segs[int(i * step)] for i in range(max_segments)]
    return segs


def make_samples(tokenizer: object, docs: Sequence[Document], opts: SampleOptions) -> list[Sample]:
    """The documents' segments, each cut at ``prompt_frac`` (one token at least each side)."""
    samples = []
    for seg in segments(tokenizer, docs, opts.seq_len, opts.max_samples):
        cut = min(len(seg) - 1, max(1, round(opts.prompt_frac * len(seg))))
        samples.append(Sample(seg[:cut], seg[cut:]))
    return samples
