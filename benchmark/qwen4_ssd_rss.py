"""Peak memory of a ``qwen4_exp`` server start whose PLE table is far larger than its RAM
cache: ``--engram-offload ssd`` (the server's default reader, mmap, and ``ssd-direct``:
``--engram-ssd-read direct``) against ``hbm`` (upstream's table in host memory on the
CPU engine) and ``off``.

Writes (or reuses) a tiny random Qwen3.8-Flash-Next checkpoint with one PLE table of
about ``--table-gib`` GiB (e4m3 rows, streamed: never whole in memory), converts it once
with ``python -m engram.convert`` (timed), then starts real SGLang CPU servers one after
another, each sampled every ``--every-s`` seconds from launch through healthy and
``--requests`` greedy requests: the RSS of the server's whole process tree (launcher,
scheduler, detokenizer), and its anonymous part (RSS less file-backed and shared
pages). Mapped file pages count in RSS (clean page cache the kernel can take back, but
RSS all the same), so at each new peak the largest mappings are read per process and
file; how many a read maps depends on what the page cache holds (read-ahead, large
folios), so before each start the checkpoint and table files are read through
(``--page-cache warm``: as just downloaded and converted), or evicted.

Prints per config the peak RSS, peak anonymous RSS and start time; what each adds over
``off`` at the peak, as a share of the table; where the RSS near the peak sits;
and a last line of JSON.

    python benchmark/qwen4_ssd_rss.py --table-gib 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import psutil
from engram_testing.soak.resources import Sampler
from engram_testing.tree_memory import TreeMemory, short_key
from sglang_engram.protocol.server_config import engram_flags

from engram.cli import Parser, RawDescriptionFormatter, number, run
from engram.cli_paths import directory
from engram.errors import EngramInputError, EngramRunError
from engram.files import GIB, nearest_existing
from engram.placements import placement_named

ROOT = Path(__file__).resolve().parents[1]

# config -> (--engram-offload, --engram-ssd-read or None for the server's default, mmap)
CONFIGS = {
    "ssd": ("ssd", None),
    "ssd-direct": ("ssd", "direct"),
    "hbm": ("hbm", None),
    "off": ("off", None),
}
# NOTE: as test/serving/qwen4_served.py serves the tiny qwen4_exp: SGLang sizes the
# mamba state pool from free host memory unless told.
QWEN4_CPU_ARGS = ("--attention-backend", "torch_native", "--max-mamba-cache-size", "64")
PLE_LAYER = 3  # one table at one layer, as the released model has
ROW_BYTES = 16  # an e4m3 row of the tiny model: 256 PLE dims over 16 hash heads
HEADS = 16
SHARDS = 64
VOCAB = 2000
PROMPT_TOKENS, NEW_TOKENS = 64, 16
SERVER_GIB = 3.0  # NOTE: a tiny qwen4_exp CPU server besides its table (measured ~2.5)


def vocab_base(table_gib: float) -> int:
    """The prime search start that gives the PLE table about ``table_gib`` GiB: every
    hash head gets a prime bucket count just above it."""
    return max(SHARDS, round(table_gib * GIB / (HEADS * ROW_BYTES)))


def write_checkpoint(out: Path, table_gib: float, seed: int) -> tuple[Path, float]:
    """The checkpoint (reused when ``out`` holds one of these options); seconds taken."""
    from engram_testing.qwen4_tiny_checkpoint import write_tiny_checkpoint

    record = out / "rss_bench_options.json"
    wanted = {"table_gib": table_gib, "seed": seed}
    with contextlib.suppress(OSError, ValueError):
        if (out / "config.json").is_file() and json.loads(record.read_text()) == wanted:
            return out, 0.0
    start = time.monotonic()
    write_tiny_checkpoint(
        out, seed=seed, ple_layer_ids=(PLE_LAYER,), ngram_vocab_size_base=vocab_base(table_gib),
        split_ngram_parts=SHARDS, stream_tables=True,
    )  # fmt: skip
    record.write_text(json.dumps(wanted) + "\n")
    return out, time.monotonic() - start


def table_bytes(checkpoint: Path) -> int:
    from safetensors import safe_open

    with safe_open(checkpoint / "model.safetensors", "pt") as f:
        names = [n for n in f.keys() if ".ngram_embedding.shard_" in n]
        return sum(f.get_slice(n).get_shape()[0] for n in names) * ROW_BYTES


def convert(checkpoint: Path, ssd_dir: Path) -> float:
    """``python -m engram.convert`` once; its seconds (a current table is reused)."""
    start = time.monotonic()
    cmd = [sys.executable, "-m", "engram.convert", "--checkpoint", str(checkpoint),
           "--out", str(ssd_dir), "--quiet"]  # fmt: skip
    subprocess.run(cmd, check=True)
    return time.monotonic() - start


def set_page_cache(files: list[Path], mode: str) -> float:
    """The files read through (``warm``: as just downloaded or converted), evicted
    (``cold``) or left (``as-is``) before a start; the share of them then cached."""
    from engram_testing.tiers.report import drop_page_cache, resident_fraction

    if mode == "cold":
        drop_page_cache(files)
    elif mode == "warm":
        buffer = bytearray(16 << 20)
        for path in files:
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buffer):
                    pass
    return resident_fraction(files)


def placement_args(config: str, ssd_dir: Path, ram_cache_gb: float) -> list[str]:
    placement, reader = CONFIGS[config]
    files = placement_named(placement).files
    return engram_flags(
        offload=placement, ssd_dir=str(ssd_dir) if files else None,
        ram_cache_gb=ram_cache_gb if files else None, ssd_read=reader,
    )  # fmt: skip


def serve_and_sample(
    placement: str, checkpoint: Path, flags: list[str], args: argparse.Namespace
) -> dict:
    """One server's start and requests under the sampler; its peaks and timings."""
    from engram_testing.client import generate_ids
    from engram_testing.server import free_port, sglang_server

    port = free_port()
    memory = TreeMemory(port)
    sampler = Sampler(args.every_s, memory)
    rng = random.Random(args.seed)
    log = args.work / f"{placement}.server.log"
    start = time.monotonic()
    sampler.start()
    try:
        server = sglang_server(checkpoint, *QWEN4_CPU_ARGS, *flags, log=log,
                               timeout_s=args.timeout_s, port=port)  # fmt: skip
        with server as url:
            healthy_s, healthy_at = time.monotonic() - start, time.time()
            for _ in range(args.requests):
                prompt = [rng.randrange(2, VOCAB) for _ in range(PROMPT_TOKENS)]
                generate_ids(url, prompt, NEW_TOKENS)
    finally:
        sampler.stop()
    rows = [r for _, r in sampler.rows if r]
    if not rows:
        raise EngramRunError(f"{placement}: no memory sample of the server; see {log}")
    to_healthy = [r for t, r in sampler.rows if r and t <= healthy_at] or rows
    return {
        "peak_rss_gib": max(r["rss"] for r in rows) / GIB,
        "peak_anon_gib": max(r["anon"] for r in rows) / GIB,
        "peak_rss_to_healthy_gib": max(r["rss"] for r in to_healthy) / GIB,
        "start_s": healthy_s,
        "samples": len(rows),
        "largest_mappings_at_peak_gib": memory.mappings_at_peak,
        "log": str(log),
    }


def check_room(args: argparse.Namespace) -> None:
    need = SERVER_GIB + (args.table_gib if "hbm" in args.placements else 0.5)
    have = psutil.virtual_memory().available / GIB
    if need > have:
        raise EngramInputError(
            f"{', '.join(args.placements)} need about {need:.1f} GiB of memory, "
            f"{have:.1f} GiB is available; give a smaller --table-gib or leave out hbm"
        )
    disk = psutil.disk_usage(str(nearest_existing(args.work))).free / GIB
    if 2.2 * args.table_gib > disk:
        raise EngramInputError(
            f"the checkpoint and its SSD table need about {2.2 * args.table_gib:.1f} GiB "
            f"under {args.work}, {disk:.1f} GiB is free"
        )


def summarise(results: dict, table_gib: float, ram_cache_gb: float) -> dict:
    summary: dict = {"table_gib": round(table_gib, 4), "ram_cache_gib": ram_cache_gb}
    off = results.get("off")
    for name in [n for n in CONFIGS if n != "off"]:
        if off and name in results:
            extra = results[name]["peak_rss_gib"] - off["peak_rss_gib"]
            summary[f"{name}_minus_off_peak_rss_gib"] = round(extra, 4)
            summary[f"{name}_minus_off_share_of_table"] = round(extra / table_gib, 4)
            anon = results[name]["peak_anon_gib"] - off["peak_anon_gib"]
            summary[f"{name}_minus_off_peak_anon_gib"] = round(anon, 4)
    summary["placements"] = {
        n: {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
        for n, r in results.items()
    }
    return summary


def print_table(summary: dict) -> None:
    print(
        f"\nPLE table {summary['table_gib']:.3f} GiB, ssd RAM cache {summary['ram_cache_gib']:g} GiB"
    )
    print(
        f"{'placement':<10}{'peak RSS GiB':>14}{'peak anon GiB':>15}{'RSS to healthy':>16}{'start s':>9}"
    )
    for name, r in summary["placements"].items():
        print(f"{name:<10}{r['peak_rss_gib']:>14.3f}{r['peak_anon_gib']:>15.3f}"
              f"{r['peak_rss_to_healthy_gib']:>16.3f}{r['start_s']:>9.1f}")  # fmt: skip
    for name in [n for n in CONFIGS if n != "off"]:
        if f"{name}_minus_off_peak_rss_gib" in summary:
            print(f"{name} peak RSS minus off: {summary[f'{name}_minus_off_peak_rss_gib']:+.3f} GiB "
                  f"= {100 * summary[f'{name}_minus_off_share_of_table']:.1f} % of the table "
                  f"(anonymous {summary[f'{name}_minus_off_peak_anon_gib']:+.3f} GiB)")  # fmt: skip
    for name, r in summary["placements"].items():
        held = ", ".join(
            f"{short_key(key)} {gib:.2f}" for key, gib in r["largest_mappings_at_peak_gib"].items()
        )
        print(f"{name}: largest mappings near the peak (GiB over the tree): {held}")


def measure(args: argparse.Namespace) -> int:
    check_room(args)
    args.work.mkdir(parents=True, exist_ok=True)
    stem = f"qwen4-ple-{args.table_gib:g}g"
    checkpoint, written_s = write_checkpoint(args.work / stem, args.table_gib, args.seed)
    table_gib = table_bytes(checkpoint) / GIB
    ssd_dir = args.work / f"{stem}-ssd"
    convert_s = (
        convert(checkpoint, ssd_dir)
        if any(placement_named(CONFIGS[n][0]).files for n in args.placements)
        else None
    )
    print(f"checkpoint {checkpoint} ({table_gib:.3f} GiB table, written in {written_s:.0f} s), "
          f"converted in {convert_s if convert_s is None else round(convert_s, 1)} s", flush=True)  # fmt: skip
    results = {}
    # NOTE: numpy and matplotlib: after the flags
    from engram_testing.tiers.report import table_files

    files = [checkpoint / "model.safetensors", *table_files(ssd_dir)]
    for name in args.placements:
        flags = placement_args(name, ssd_dir, args.ram_cache_gb)
        cached = set_page_cache(files, args.page_cache)
        print(f"[{name}] starting server ({cached:.0%} of the checkpoint and table files "
              f"in the page cache): {' '.join(flags)}", flush=True)  # fmt: skip
        results[name] = serve_and_sample(name, checkpoint, flags, args) | {"page_cached": cached}
        print(f"[{name}] {json.dumps(results[name])}", flush=True)
    summary = summarise(results, table_gib, args.ram_cache_gb)
    summary |= {
        "checkpoint_write_s": round(written_s, 1),
        "convert_s": convert_s,
        "page_cache": args.page_cache,
    }
    print_table(summary)
    (args.work / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


def _placements(text: str) -> tuple[str, ...]:
    names = tuple(n for n in text.split(",") if n)
    if not names or any(n not in CONFIGS for n in names):
        raise argparse.ArgumentTypeError(
            f"must be a comma list of {', '.join(CONFIGS)}, not {text!r}"
        )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"names a placement twice: {text!r}")
    return names


def _parser() -> Parser:
    parser = Parser(prog="python benchmark/qwen4_ssd_rss.py", description=__doc__,
                    formatter_class=RawDescriptionFormatter)  # fmt: skip
    parser.add_argument("--table-gib", type=number(float, above=0, at_most=1024), default=4.0,
                        help="the PLE table's size in GiB")  # fmt: skip
    parser.add_argument("--ram-cache-gb", type=number(float, above=0), default=0.25,
                        help="the ssd placement's --engram-ram-cache-gb")  # fmt: skip
    parser.add_argument("--placements", type=_placements, default=",".join(CONFIGS),
                        help="comma list, started one after another in this order")  # fmt: skip
    parser.add_argument("--requests", type=number(int, at_least=0), default=4,
                        help=f"greedy requests per server once healthy ({PROMPT_TOKENS} "
                        f"prompt + {NEW_TOKENS} new tokens)")  # fmt: skip
    parser.add_argument("--every-s", type=number(float, at_least=0.05), default=0.2,
                        help="seconds between memory samples")  # fmt: skip
    parser.add_argument("--page-cache", choices=("warm", "cold", "as-is"), default="warm",
                        help="before each start, the checkpoint and table files read through "
                        "(as just downloaded and converted: mapped pages count most), "
                        "evicted, or left as they are")  # fmt: skip
    parser.add_argument(
        "--seed", type=number(int, at_least=0), default=0, help="weights and prompts"
    )
    parser.add_argument("--timeout-s", type=number(float, above=0), default=1800,
                        help="longest wait for one server to become healthy")  # fmt: skip
    parser.add_argument("--work", type=directory, default=ROOT / "out" / "qwen4_ssd_rss",
                        help="checkpoint, SSD table, server logs, summary.json (reused)")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run(lambda: measure(args), args)


if __name__ == "__main__":
    sys.exit(main())
