"""The RAM cache's hit ratio against its size, on the held-out prompts' prefill rows,
empty at the start or seeded from a frequency profile as ``--engram-seed-profile`` seeds
it (:func:`engram.tables.ssd.seeding.seed_plan`); and its panel in the benchmark's PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from engram.model.config import TinyEngramConfig
from engram.profile import RowProfile
from engram.ssd.row_cache import RowCache
from engram.tables.ssd.seeding import seed_plan
from engram_testing.tiers.workload import prompt_rows

CURVE_FRACTIONS = [1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2]
# the RAM-cache curves' labels: empty at start, seeded from the train-split profile, and
# seeded with misses never admitted; each drawn in the colour of the config beside it,
# and each its key in the benchmark's JSON
CURVES = ("unseeded (LRU)", "seeded (LRU)", "seeded, misses not admitted")
CURVE_CONFIGS = {CURVES[0]: "ssd-1/16", CURVES[1]: "ssd-1/16-seeded", CURVES[2]: "ssd-1/16-seeded"}
CURVE_KEYS = dict(
    zip(
        CURVES,
        ("cache_curve", "cache_curve_seeded", "cache_curve_seeded_no_admission"),
        strict=True,
    )
)


def heldout_curves(
    model_dir: Path, pieces: list[list[int]], profile: Path | None
) -> dict[str, dict[str, Any]]:
    """Each curve over ``pieces`` at :data:`CURVE_FRACTIONS`, by label: an empty cache, and
    with ``profile`` a seeded one and one seeded whose misses are never admitted (what the
    profile alone covers)."""
    cfg = TinyEngramConfig.from_pretrained(model_dir)
    rows = prompt_rows(model_dir, pieces)  # NOTE: hashed once, replayed by every curve
    curves = {CURVES[0]: rows_curve(cfg, rows, CURVE_FRACTIONS)}
    if profile is not None:
        seed = RowProfile.load(profile).rows
        curves[CURVES[1]] = rows_curve(cfg, rows, CURVE_FRACTIONS, seed)
        curves[CURVES[2]] = rows_curve(cfg, rows, CURVE_FRACTIONS, seed, admit=False)
    return curves


def cache_curve(
    model_dir: Path,
    prompts: list[list[int]],
    fractions: list[float],
    seed: dict[int, np.ndarray] | None = None,
    *,
    admit: bool = True,
) -> dict[str, Any]:
    """RAM-cache hit ratio of the prompts' rows, replayed in order (one lookup per
    prompt and layer, as a prefill reads them) through one ``RowCache`` per table of
    ``fraction`` x that table's bytes, first seeded with ``seed`` (layer -> its rows
    ranked hottest first) where given; and the ratio of an unbounded cache that only
    learns from these prompts (every repeat a hit). Hits and misses count distinct rows
    per lookup, as the server's counters do. ``admit=False``: misses are not admitted
    (the seeded rows stay: what the seed alone covers, no LRU)."""
    cfg = TinyEngramConfig.from_pretrained(model_dir)
    return rows_curve(cfg, prompt_rows(model_dir, prompts), fractions, seed, admit=admit)


def rows_curve(
    cfg: TinyEngramConfig,
    rows: list[list[np.ndarray]],
    fractions: list[float],
    seed: dict[int, np.ndarray] | None = None,
    *,
    admit: bool = True,
) -> dict[str, Any]:
    """``cache_curve`` of the prompts' rows (``prompt_rows``) of a model of config ``cfg``."""
    layers, row_bytes = list(cfg.engram_layer_ids), cfg.spec.row_bytes
    lookups = [np.unique(layer) for prompt in rows for layer in prompt]
    layer_of = [i for _ in rows for i in range(len(layers))]
    total = sum(u.size for u in lookups)
    seen: list[set[int]] = [set() for _ in layers]
    repeats = 0
    for layer, ids in zip(layer_of, lookups, strict=True):
        before = len(seen[layer])
        seen[layer].update(ids.tolist())
        repeats += ids.size - (len(seen[layer]) - before)
    points = []
    for fraction in fractions:
        # NOTE: RowCache itself and its take/put steps (take the hits, then admit what
        # missed), with one-byte rows: a cache of half an 8 GiB table would hold 4 GiB.
        caches = [
            RowCache(max(1, int(fraction * n * row_bytes) // row_bytes), 1)
            for n in cfg.engram_num_embeddings
        ]
        if seed is not None:
            for cache, layer_id in zip(caches, layers, strict=True):
                ids, stamps = seed_plan(seed[layer_id], cache)
                cache.seed(ids, np.zeros((ids.size, 1), dtype=np.uint8), stamps)
        hits = 0
        for layer, ids in zip(layer_of, lookups, strict=True):
            need = np.ones(ids.size, dtype=bool)
            out = np.zeros((ids.size, 1), dtype=np.uint8)
            missed = np.empty(ids.size, dtype=np.int64)
            took, misses = caches[layer].take(ids, need, out, missed)
            hits += took
            if admit:
                caches[layer].put(ids[missed[:misses]], out, missed[:misses])
        points.append({"fraction": fraction, "hit_ratio": hits / total})
        del caches
    unbounded = repeats / total
    return {
        "points": points,
        "seeded": seed is not None,
        "admit": admit,
        "unbounded_hit_ratio": unbounded,
        "distinct_rows": sum(len(s) for s in seen),
        "row_lookups": total,
        "fraction_for_90pct_of_hits": _fraction_for(points, 0.9 * unbounded),
    }


def _fraction_for(points: list[dict[str, float]], target: float) -> float | None:
    """The smallest cache fraction whose hit ratio reaches ``target`` (log-linear
    interpolation between measured sizes); None if none does."""
    previous = None
    for p in points:
        if p["hit_ratio"] >= target:
            if previous is None or p["hit_ratio"] == previous["hit_ratio"]:
                return p["fraction"]
            share = (target - previous["hit_ratio"]) / (p["hit_ratio"] - previous["hit_ratio"])
            lo, hi = np.log2(previous["fraction"]), np.log2(p["fraction"])
            return float(2 ** (lo + share * (hi - lo)))
        previous = p
    return None


def draw_curves(
    ax: Any, curves: dict[str, dict[str, Any]], served: float | None, colors: dict[str, str]
) -> None:
    """Hit ratio against cache size (log scale), one line per curve (label -> curve; in
    ``colors[label]`` where given: the config the line stands for), a curve without
    admission dotted, the unbounded learning cache dashed, and ``served``, the cache size
    the servers ran with, marked."""
    for label, curve in curves.items():
        xs = [p["fraction"] for p in curve["points"]]
        ys = [p["hit_ratio"] for p in curve["points"]]
        style = "-" if curve["admit"] else ":"
        ax.plot(xs, ys, style, marker="o", linewidth=1.4, label=label, color=colors.get(label))
    unbounded = next(iter(curves.values()))["unbounded_hit_ratio"]
    ax.axhline(unbounded, color="grey", linestyle="--", linewidth=1, label="unbounded, unseeded")
    if served is not None:
        ax.axvline(served, color="grey", linestyle=":", linewidth=1, label="servers' cache size")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("RAM cache size (share of each table)")
    ax.set_ylabel("RAM-cache hit ratio, held-out prompts' prefill rows")
    ax.set_title("RAM-cache hit ratio against its size", fontsize=11)
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, loc="lower right")
