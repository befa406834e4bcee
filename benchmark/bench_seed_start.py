"""Start to first token of an ``ssd`` server, seeded (``--engram-seed-profile``) against
unseeded: what seeding in the background costs a server that has just been launched.

Builds (or reuses) the model, the ssd table files and the train-split profile of
``bench_serving_tiers.py`` (same defaults, same paths), converts the checkpoint's tables
into the ssd directory untimed (``engram.ssd.converter``, the decision every start makes:
a directory already converted is reused), then per repeat launches
``python -m sglang.launch_server`` with ``--engram-offload ssd`` and a RAM cache of 1/16
of the tables, read with ``--engram-ssd-read direct``, once unseeded and once seeded (the
order swapped each repeat), and times:

* **ready**: from the launch to the first ``/health`` answer (polled every 2 s);
* **first tokens**: from the launch to the end of a burst of ``--burst`` held-out prompts
  sent at once the moment the server is ready, one new token each (what the first users
  of a fresh server wait), the burst's own time beside it;
* for the seeded server, the rows seeded when the burst ended and the seconds the
  seeding took in all (``sglang:engram_ssd_seed*`` on ``/metrics``).

Prints each start, the medians and the seeded/unseeded ratios per repeat with their
median, and a last line of JSON.

    python benchmark/bench_seed_start.py --table-gib 4 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engram_testing.bench_text import bench_text
from engram_testing.client import generate_ids, metrics
from engram_testing.server import sglang_server
from engram_testing.tiers.seed_profile import ensure_profile, profile_top
from engram_testing.tiers.servers import (
    BACKBONES,
    SEEDED_ROWS,
    build_model,
    server_args,
    slug,
    tokenizer_of,
    wait_seeded,
)
from engram_testing.tiers.workload import heldout_ids

from engram.cli import Parser, run
from engram.ssd.converter import convert_checkpoint

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "ssd-1/16"
SEEDED = CONFIG + "-seeded"


def burst(url: str, prompts: list[list[int]]) -> None:
    """The prompts at once, one new token each."""
    with ThreadPoolExecutor(len(prompts)) as pool:
        list(pool.map(lambda p: generate_ids(url, p, 1), prompts))


def start_once(name: str, model: Path, prompts: list[list[int]], args, log: Path) -> dict:
    """One launch of config ``name``: seconds to ready and to the burst's first tokens."""
    flags = server_args(name, args.table_gib, args.ssd_dir, args.profile)
    launched = time.monotonic()
    with sglang_server(model, *flags, log=log, timeout_s=args.timeout_s) as url:
        ready = time.monotonic()
        burst(url, prompts)
        done = time.monotonic()
        out = {
            "ready_s": round(ready - launched, 2),
            "first_tokens_s": round(done - launched, 2),
            "burst_s": round(done - ready, 2),
        }
        if name == SEEDED:
            out["rows_seeded_at_first_tokens"] = metrics(url).get(SEEDED_ROWS, 0.0)
            seeding = wait_seeded(url, timeout_s=args.timeout_s)
            out["rows_seeded"] = seeding["rows"]
            out["seed_table_seconds"] = round(seeding["table_seconds"], 2)
            out["seeded_after_s"] = round(time.monotonic() - launched, 2)
    return out


def parser() -> argparse.ArgumentParser:
    parser = Parser(prog="benchmark/bench_seed_start.py", description=__doc__.splitlines()[0])
    parser.add_argument("--table-gib", type=float, default=4.0, help="the model's table size")
    parser.add_argument(
        "--backbone", choices=list(BACKBONES), default="text", help="as bench_serving_tiers.py"
    )
    parser.add_argument("--model", type=Path, help="default models/engram-<BACKBONE>-<G>g")
    parser.add_argument("--ssd-dir", type=Path, help="default models/engram-<BACKBONE>-<G>g-ssd")
    parser.add_argument(
        "--profile",
        type=Path,
        help="the seed profile, made over the benchmark text's train split unless one of it "
        "for this model is there (default models/engram-<BACKBONE>-<G>g-train-profile.npz)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="starts of each, interleaved")
    parser.add_argument("--burst", type=int, default=8, help="prompts sent once ready")
    parser.add_argument("--input-len", type=int, default=256, help="tokens per burst prompt")
    parser.add_argument("--timeout-s", type=int, default=1800, help="limit of each start")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "out" / "bench_seed_start", help="logs and summary"
    )
    return parser


def main(args: argparse.Namespace) -> int:
    for flag, value in (("--repeats", args.repeats), ("--burst", args.burst)):
        if value < 1:
            print(f"error: {flag} must be at least 1, not {value}")
            return 2
    stem = ROOT / "models" / f"engram-{args.backbone}-{args.table_gib:g}g"
    args.model = args.model or stem
    args.ssd_dir = args.ssd_dir or stem.with_name(stem.name + "-ssd")
    args.profile = args.profile or stem.with_name(stem.name + "-train-profile.npz")
    # NOTE: a request for more prompts than the held-out text gives fails before any build
    need = 2 * args.repeats * args.burst
    pieces = heldout_ids(tokenizer_of(args.model, args.backbone), args.input_len, need)
    text = {split: bench_text(split) for split in ("heldout", "train")}
    print(f"prompts: {text['heldout'].describe()}", flush=True)
    print(f"seed profile text: {text['train'].describe()}", flush=True)
    work = args.out
    work.mkdir(parents=True, exist_ok=True)

    model = build_model(args.table_gib, args.model, args.backbone)
    ensure_profile(model, args.profile, profile_top(model, 1 / 16))
    print("the ssd table files, untimed (written if they are not there)", flush=True)
    convert_checkpoint(model, args.ssd_dir, show_progress=False)

    starts: dict[str, list[dict]] = {CONFIG: [], SEEDED: []}
    for rep in range(args.repeats):
        order = [CONFIG, SEEDED] if rep % 2 == 0 else [SEEDED, CONFIG]
        for i, name in enumerate(order):
            # NOTE: each start gets prompts no other start sent (no prefix-cache help)
            k = (2 * rep + i) * args.burst
            log = work / f"{slug(name)}_r{rep}.server.log"
            got = start_once(name, model, pieces[k : k + args.burst], args, log)
            starts[name].append(got)
            print(f"[{name}] repeat {rep}: {json.dumps(got)}", flush=True)

    ratios = {
        key: [
            round(s[key] / u[key], 3) for s, u in zip(starts[SEEDED], starts[CONFIG], strict=True)
        ]
        for key in ("ready_s", "first_tokens_s", "burst_s")
    }
    summary = {
        "table_gib": args.table_gib,
        "backbone": args.backbone,
        "burst": args.burst,
        "text": {split: t.record() for split, t in text.items()},
        "starts": starts,
        "medians": {
            n: {k: statistics.median(s[k] for s in runs) for k in runs[0]}
            for n, runs in starts.items()
        },
        "seeded_over_unseeded_per_repeat": ratios,
        "seeded_over_unseeded": {k: statistics.median(v) for k, v in ratios.items()},
    }
    print()
    for name, med in summary["medians"].items():
        print(f"{name}: medians {json.dumps(med)}")
    for key, per in ratios.items():
        print(
            f"seeded / unseeded {key}: median {summary['seeded_over_unseeded'][key]:.3f} "
            f"(repeats {', '.join(f'{r:.3f}' for r in per)})"
        )
    (work / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    options = parser().parse_args()
    sys.exit(run(lambda: main(options), options))
