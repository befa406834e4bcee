"""Where one decode step's ``ssd`` lookup spends its time, outside a server.

Opens the first Engram layer's converted table (``bench_serving_tiers.py`` leaves it
under ``models/engram-random-<G>g-ssd``) with the chosen reader and a RAM cache of
``--cache-fraction`` of it, prefills ``--batch`` held-out Python pieces (their rows go
through the cache as a server's prefill does), then looks up the rows of
``--steps`` decode steps (the n-grams ending at each sequence's next token) under
cProfile. Prints the time per step and the functions that take it.

    python benchmark/profile_ssd_step.py --table-gib 8
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch
from engram_testing.tiers.workload import heldout_ids, model_hasher

from engram.ssd.directory import table_dir
from engram.tables import create_table

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-gib", type=float, default=8.0)
    parser.add_argument("--read", default="direct")
    parser.add_argument("--cache-fraction", type=float, default=1 / 16)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    model = ROOT / "models" / f"engram-random-{args.table_gib:g}g"
    hasher, cfg = model_hasher(model)
    layer = cfg.engram_layer_ids[0]
    rows = cfg.engram_num_embeddings[0]
    table = create_table(
        "ssd", None, None, device=torch.device("cpu"),
        path=table_dir(str(model.with_name(model.name + "-ssd")), layer, ""),
        head_dim=cfg.spec.head_dim, num_rows=rows, read=args.read,
        ram_cache_bytes=int(args.cache_fraction * rows * cfg.spec.row_bytes),
    )  # fmt: skip
    pieces = heldout_ids(model, args.prompt_len + args.steps)[: args.batch]
    ids = torch.stack([hasher.hash(torch.tensor(p))[:, 0] for p in pieces])  # [B, T, cols]
    table.drop_page_cache()
    for seq in ids[:, : args.prompt_len]:
        table.lookup(seq)
    steps = [ids[:, args.prompt_len + s] for s in range(args.steps)]  # [B, cols] each
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for step in steps:
        table.lookup(step)
    profiler.disable()
    per_step = (time.perf_counter() - started) / args.steps
    stats = table.stats()
    print(
        f"{args.read}: {per_step * 1e3:.2f} ms per decode step of {args.batch} sequences "
        f"({steps[0].numel()} row ids); RAM cache hit ratio {stats['ram_cache_hit_ratio']:.3f}"
    )
    pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
    table.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
