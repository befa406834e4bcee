"""The frequency profile the benchmarks' seeded ssd configs start from.

It is counted over the *train* split of the benchmark text
(:mod:`engram_testing.bench_text`: files the held-out prompts never come from), its files
named to ``python -m engram.profile`` as a user would name them. A profile already at the
path is reused while it was made for this model's hash, of these files (their number and
bytes) and keeps enough rows.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from engram.model.config import TinyEngramConfig
from engram.model.directory import read_config
from engram.profile import HashIdentity, load_tokenizer, model_hasher, read_header
from engram_testing.bench_text import bench_text

CORPUS_SPLIT = "train"


def profile_top(model_dir: Path, fraction: float) -> int:
    """Rows a profile must keep per table to fill a cache of ``fraction`` of the largest
    table (ranked rows beyond it serve no cache this benchmark sizes)."""
    cfg = TinyEngramConfig.from_pretrained(model_dir)
    return math.ceil(max(cfg.engram_num_embeddings) * fraction)


def _corpus() -> dict[str, int]:
    """What a profile of the train split records of its text (``engram.profile``'s
    header: files and bytes)."""
    text = bench_text(CORPUS_SPLIT)
    return {"files": len(text.files), "bytes": sum(len(t.encode()) for t in text.texts)}


def reusable(profile: Path, model_dir: Path, top: int) -> bool:
    """Whether ``profile`` exists, was made for ``model_dir``'s hash, of the train split,
    and keeps ``top`` rows."""
    if not profile.is_file():
        return False
    header = read_header(profile)
    hasher = model_hasher(read_config(model_dir), load_tokenizer(model_dir), str(model_dir))
    served = HashIdentity.of(hasher)
    made_for = HashIdentity.from_json(header["identity"])
    of_text = {k: header["corpus"].get(k) for k in ("files", "bytes")} == _corpus()
    return made_for.mismatch(served) is None and of_text and int(header["top"]) >= top


def ensure_profile(model_dir: Path, profile: Path, top: int, quiet: bool = False) -> Path:
    """``profile``, made by ``python -m engram.profile`` over the train split unless a
    reusable one is there."""
    if reusable(profile, model_dir, top):
        print(f"reusing the seed profile {profile}", flush=True)
        return profile
    text = bench_text(CORPUS_SPLIT)
    print(f"profiling {text.describe()} -> {profile}", flush=True)
    subprocess.run(
        [sys.executable, "-m", "engram.profile", str(model_dir), *map(str, text.files),
         "--out", str(profile), "--top", str(top), *(["--quiet"] if quiet else [])],
        check=True,
    )  # fmt: skip
    return profile
