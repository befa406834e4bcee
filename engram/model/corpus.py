"""The training text every machine has: the running interpreter's standard library.

Documents are the stdlib's ``.py`` source files (named by their path under the stdlib
directory; test suites and installed packages left out) and the pydoc topics of
``pydoc_data.topics`` (named ``pydoc:<topic>``). Each document goes to the train or the
held-out split by a hash of its name alone, so the split is the same on every machine with
the same Python, and a document never straddles the two.
"""

from __future__ import annotations

import hashlib
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from engram.errors import EngramInputError

# NOTE: one document in HELDOUT_MODULUS goes to the held-out split.
HELDOUT_MODULUS = 20
EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test"})
SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class Document:
    name: str
    text: str

    @property
    def split(self) -> str:
        digest = hashlib.sha256(self.name.encode()).digest()
        return "heldout" if int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0 else "train"


def stdlib_documents() -> list[Document]:
    """Every stdlib source file and pydoc topic of this interpreter, sorted by name."""
    import pydoc_data.topics

    root = Path(sysconfig.get_paths()["stdlib"])
    docs = [
        Document(str(path.relative_to(root)), path.read_text(encoding="utf-8", errors="replace"))
        for path in root.rglob("*.py")
        if not EXCLUDED_DIRS & set(path.relative_to(root).parts)
    ]
    docs += [Document(f"pydoc:{name}", text) for name, text in pydoc_data.topics.topics.items()]
    return sorted(docs, key=lambda d: d.name)


def split_documents(docs: Iterable[Document], split: str) -> list[Document]:
    if split not in SPLITS:
        raise EngramInputError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return [d for d in docs if d.split == split]


def file_documents(paths: Sequence[str | Path]) -> list[Document]:
    """Text files given on a command line, as documents (one clear line if one is missing)."""
    docs = []
    for path in paths:
        try:
            docs.append(Document(str(path), Path(path).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            raise EngramInputError(f"cannot read {path} as UTF-8 text: {exc}") from exc
    return docs


def encode_documents(tokenizer: object, docs: Sequence[Document]) -> list[list[int]]:
    """Token ids of each document (empty documents dropped)."""
    encoded = tokenizer.encode_batch([d.text for d in docs])  # type: ignore[attr-defined]
    return [e.ids for e in encoded if e.ids]


def token_stream(tokenizer: object, docs: Sequence[Document], eos_id: int) -> torch.Tensor:
    """All documents' ids, each followed by ``eos_id``, as one int64 tensor."""
    ids = [tok for doc in encode_documents(tokenizer, docs) for tok in (*doc, eos_id)]
    if not ids:
        raise EngramInputError("the corpus tokenizes to nothing (no non-empty document)")
    return torch.tensor(ids, dtype=torch.int64)
