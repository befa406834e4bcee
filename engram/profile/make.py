"""Making a profile: read the corpus, tokenise it in groups, count, keep the top rows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram.hashing import NgramHasher
from engram.profile.corpus import pieces
from engram.profile.counting import BatchHasher, RowCounts
from engram.profile.file import RowProfile
from engram.profile.identity import HashIdentity
from engram.progress import progress_bar

# NOTE: characters per tokeniser call: enough texts for its threads, little memory.
GROUP_CHARS = 8 << 20
DEFAULT_TOP = 1 << 20


def make_profile(
    hasher: BatchHasher,
    tokenizer: Any,
    files: Sequence[Path],
    *,
    top: int = DEFAULT_TOP,
    show_progress: bool = True,
    identity: HashIdentity | None = None,
) -> RowProfile:
    """The profile of the text ``files`` through ``hasher``, its texts tokenised by
    ``tokenizer`` (a ``tokenizers.Tokenizer``; no special tokens added). ``identity``:
    the hash's (:func:`~engram.profile.model.profile_hash`; an ``NgramHasher``'s own
    when not given)."""
    if identity is None:
        assert isinstance(hasher, NgramHasher), "a PLE hash's identity names its tokenizer"
        identity = HashIdentity.of(hasher)
    counts = RowCounts(hasher, [t.num_rows for t in identity.tables])
    total = sum(f.stat().st_size for f in files)
    group: list[str] = []
    chars = 0

    def flush() -> None:
        nonlocal group, chars
        encoded = tokenizer.encode_batch(group, add_special_tokens=False)
        counts.add([e.ids for e in encoded])
        # NOTE: characters stand in for bytes (the same for ASCII); the end squares up
        bar.update(min(chars, total - bar.n))
        group, chars = [], 0

    with progress_bar(total, "profile", unit="B", unit_scale=True, show=show_progress) as bar:
        for path in files:
            for piece in pieces(path.read_text(encoding="utf-8", errors="replace")):
                group.append(piece)
                chars += len(piece)
                if chars >= GROUP_CHARS:
                    flush()
        if group:
            flush()
        bar.update(total - bar.n)
    ranked = [counts.ranked(i, top) for i in range(len(identity.tables))]
    return RowProfile(
        identity=identity,
        top=top,
        rows={t.layer: r[0] for t, r in zip(identity.tables, ranked, strict=True)},
        counts={t.layer: r[1] for t, r in zip(identity.tables, ranked, strict=True)},
        corpus={"files": len(files), "bytes": total, "tokens": counts.tokens},
    )
