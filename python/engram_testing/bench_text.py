"""The benchmarks' text, the same on every machine: a pinned package's own sources.

The held-out prompts and the seed profile's training text come from the Python sources of
transformers 5.19.0 (pinned in ``pyproject.toml``; one ``py3-none-any`` wheel, so its
files are byte for byte the same on every Python and platform), outside ``models/`` (whose
files are largely generated copies of one another: held-out text would be in training).
``bench_text.tsv`` beside this module lists every file, its split and its SHA-256; each
file is checked as it is read, and a split is named by the installed folder and the
digest of its lines of that list (:meth:`BenchText.describe`), so that two machines'
figures can be told to be of the same text. The split was drawn once by a hash of the
path (one file in ten held out) and is fixed by the list.

The tiny model's own training and evaluation text (:mod:`engram.model.corpus`, the
interpreter's standard library) is not this: the bundled model was trained on it.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from engram.errors import EngramInputError, EngramRunError

PACKAGE, VERSION = "transformers", "5.19.0"
FILE_LIST = Path(__file__).with_name("bench_text.tsv")
SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class BenchText:
    """One split: its files (absolute paths) and their texts, each checked."""

    split: str
    root: Path
    files: tuple[Path, ...]
    texts: tuple[str, ...]
    sha256: str  # NOTE: of this split's lines of bench_text.tsv, in order

    def describe(self) -> str:
        size = sum(len(t.encode()) for t in self.texts)
        return (
            f"{PACKAGE} {VERSION}'s sources, {self.split} split: {len(self.files)} files under "
            f"{self.root} listed in {FILE_LIST.name}, {size:,} bytes, sha256 {self.sha256}"
        )

    def record(self) -> dict[str, object]:
        """What a benchmark's JSON says of the text."""
        return {
            "package": f"{PACKAGE}=={VERSION}",
            "root": str(self.root),
            "files": len(self.files),
            "list": FILE_LIST.name,
            "sha256": self.sha256,
        }


def _root() -> Path:
    try:
        found = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        raise EngramRunError(
            f"the benchmark text is {PACKAGE} {VERSION}'s sources, and {PACKAGE} is not "
            f"installed; pip install {PACKAGE}=={VERSION}"
        ) from None
    if found != VERSION:
        raise EngramRunError(
            f"the benchmark text is {PACKAGE} {VERSION}'s sources, and {found} is installed; "
            f"pip install {PACKAGE}=={VERSION}"
        )
    return Path(str(metadata.distribution(PACKAGE).locate_file(PACKAGE)))


@functools.cache
def bench_text(split: str) -> BenchText:
    """The files of ``split``, each read and checked against the list."""
    if split not in SPLITS:
        raise EngramInputError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    root = _root()
    lines = [
        line
        for line in FILE_LIST.read_text().splitlines()
        if line and not line.startswith("#") and line.split("\t")[0] == split
    ]
    files, texts = [], []
    for line in lines:
        _, want, name = line.split("\t")
        path = root / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise EngramRunError(
                f"benchmark text {path}: {exc.strerror}; reinstall {PACKAGE}"
            ) from None
        if hashlib.sha256(data).hexdigest() != want:
            raise EngramRunError(
                f"benchmark text {path} is not {PACKAGE} {VERSION}'s file (its SHA-256 differs "
                f"from {FILE_LIST.name}'s); reinstall {PACKAGE}=={VERSION}"
            )
        files.append(path)
        texts.append(data.decode("utf-8"))
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return BenchText(split, root, tuple(files), tuple(texts), digest)


def too_little(what: str, have: int, need: int, text: BenchText) -> EngramInputError:
    """The one-line error for a request of more pieces of text than there are."""
    return EngramInputError(
        f"the benchmark text ({text.describe()}) gives {have:,} {what}; {need:,} are needed: "
        "ask for fewer or shorter ones"
    )
