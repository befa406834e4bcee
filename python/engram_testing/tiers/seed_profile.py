"""The frequency profile ``bench_serving_tiers.py``'s seeded ssd config starts from.

It is counted over the *train* split of this interpreter's standard library
(:mod:`engram.model.corpus`: every document the held-out prompts do not come from, each
document in one split by a hash of its name), written as a folder of text files and
profiled with ``python -m engram.profile``, as a user would. A profile already at the
path is reused while it was made for this model's hash and keeps enough rows.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path

from engram.model.config import TinyEngramConfig
from engram.model.corpus import split_documents, stdlib_documents
from engram.model.directory import read_config
from engram.profile import HashIdentity, load_tokenizer, model_hasher, read_header

CORPUS_SPLIT = "train"


def profile_top(model_dir: Path, fraction: float) -> int:
    """Rows a profile must keep per table to fill a cache of ``fraction`` of the largest
    table (ranked rows beyond it serve no cache this benchmark sizes)."""
    cfg = TinyEngramConfig.from_pretrained(model_dir)
    return math.ceil(max(cfg.engram_num_embeddings) * fraction)


def write_corpus(folder: Path) -> Path:
    """The train split's documents as ``.txt`` files in ``folder`` (an empty one)."""
    for i, doc in enumerate(split_documents(stdlib_documents(), CORPUS_SPLIT)):
        (folder / f"{i:05d}.txt").write_text(doc.text, encoding="utf-8")
    return folder


def reusable(profile: Path, model_dir: Path, top: int) -> bool:
    """Whether ``profile`` exists, was made for ``model_dir``'s hash and keeps ``top`` rows."""
    if not profile.is_file():
        return False
    header = read_header(profile)
    hasher = model_hasher(read_config(model_dir), load_tokenizer(model_dir), str(model_dir))
    served = HashIdentity.of(hasher)
    made_for = HashIdentity.from_json(header["identity"])
    return made_for.mismatch(served) is None and int(header["top"]) >= top


def ensure_profile(model_dir: Path, profile: Path, top: int, work: Path) -> Path:
    """``profile``, made by ``python -m engram.profile`` over the train split unless a
    reusable one is there."""
    if reusable(profile, model_dir, top):
        print(f"reusing the seed profile {profile}", flush=True)
        return profile
    with tempfile.TemporaryDirectory(dir=work) as folder:
        corpus = write_corpus(Path(folder))
        print(f"profiling the stdlib's {CORPUS_SPLIT} split -> {profile}", flush=True)
        subprocess.run(
            [sys.executable, "-m", "engram.profile", str(model_dir), str(corpus),
             "--out", str(profile), "--top", str(top)],
            check=True,
        )  # fmt: skip
    return profile
