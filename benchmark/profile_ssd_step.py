"""Where one decode step's ``ssd`` lookup spends its time, outside a server.

Opens the first Engram layer's converted table (``bench_serving_tiers.py --backbone
random`` leaves it under ``models/engram-random-<G>g-ssd``; built and converted here when
it is not there) with the chosen reader and a RAM cache of ``--cache-fraction`` of it,
prefills ``--batch`` held-out pieces of the benchmark text (``engram_testing.bench_text``,
named in the output; their rows go
through the cache as a server's prefill does), then looks up the rows of
``--steps`` decode steps (the n-grams ending at each sequence's next token) under
cProfile. Prints the time per step and the functions that take it.

    python benchmark/profile_ssd_step.py --table-gib 8
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import subprocess
import sys
import time
from pathlib import Path

import torch
from engram_testing.bench_text import bench_text
from engram_testing.tiers.servers import build_model, tokenizer_of
from engram_testing.tiers.workload import heldout_ids, model_hasher

from engram.cli import Parser, number, run
from engram.ssd.directory import table_dir
from engram.ssd.readers import reader_names
from engram.tables import create_table

ROOT = Path(__file__).resolve().parents[1]
BACKBONE = "random"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark/profile_ssd_step.py", description=__doc__.splitlines()[0])
    p.add_argument("--table-gib", type=number(float, above=0), default=8.0)
    p.add_argument("--read", choices=reader_names(), default="direct")
    p.add_argument("--cache-fraction", type=number(float, above=0, at_most=1), default=1 / 16)
    p.add_argument("--batch", type=number(at_least=1), default=32)
    p.add_argument("--prompt-len", type=number(at_least=1), default=256)
    p.add_argument("--steps", type=number(at_least=1), default=64)
    return p


def main(args: argparse.Namespace) -> int:
    model = ROOT / "models" / f"engram-{BACKBONE}-{args.table_gib:g}g"
    ssd_dir = model.with_name(model.name + "-ssd")
    # NOTE: a request for more text than there is fails before anything is built
    size = args.prompt_len + args.steps
    pieces = heldout_ids(tokenizer_of(model, BACKBONE), size, args.batch)
    print(f"prompts: {bench_text('heldout').describe()}", flush=True)
    build_model(args.table_gib, model, BACKBONE)
    subprocess.run(  # NOTE: a converted table is reused (nothing written)
        [sys.executable, "-m", "engram.convert", "--checkpoint", str(model), "--out",
         str(ssd_dir), "--quiet"],
        check=True,
    )  # fmt: skip
    hasher, cfg = model_hasher(model)
    layer = cfg.engram_layer_ids[0]
    rows = cfg.engram_num_embeddings[0]
    table = create_table(
        "ssd", None, None, device=torch.device("cpu"),
        path=table_dir(str(ssd_dir), layer, ""),
        head_dim=cfg.spec.head_dim, num_rows=rows, read=args.read,
        ram_cache_bytes=int(args.cache_fraction * rows * cfg.spec.row_bytes),
    )  # fmt: skip
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
    options = parser().parse_args()
    sys.exit(run(lambda: main(options), options))
