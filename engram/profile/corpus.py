"""The text a profile is counted over: files named on the command line, and the text
files under directories named there.

A directory is walked recursively for files whose suffix is one of
:data:`TEXT_SUFFIXES`, in sorted order (hidden files and folders left out); a file named
directly is read whatever its name. Text is read as UTF-8, undecodable bytes replaced.
A text longer than :data:`PIECE_CHARS` is cut into pieces at line ends, each tokenised and
hashed on its own (the first ``N - 1`` tokens of a piece hash as a document's start do:
a few rows in a million, against tokenising megabytes in one call).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from engram.errors import EngramInputError

TEXT_SUFFIXES = frozenset({".txt", ".md", ".py", ".rst"})
PIECE_CHARS = 1 << 20


def corpus_files(paths: Sequence[str | Path]) -> list[Path]:
    """The files ``paths`` name (directories walked); one error naming a missing path or
    a corpus without any file."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += sorted(
                p
                for p in path.rglob("*")
                if p.suffix in TEXT_SUFFIXES
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        else:
            raise EngramInputError(f"corpus path {given} does not exist; check the path")
    if not files:
        suffixes = ", ".join(sorted(TEXT_SUFFIXES))
        raise EngramInputError(
            f"the corpus {', '.join(map(str, paths))} holds no text file (directories are "
            f"searched for {suffixes}); name the files or choose another directory"
        )
    return files


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """``text`` in pieces of about ``size`` characters, cut after a newline where one is."""
    start = 0
    while start < len(text):
        end = start + size
        if end < len(text):
            cut = text.rfind("\n", start, end)
            end = cut + 1 if cut > start else end
        yield text[start:end]
        start = end
