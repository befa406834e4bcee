"""Serve the tiny Engram model once per placement and drive it with SGLang's benchmark.

For each ``--engram-offload`` placement a server is started on the tiny model and
``python -m sglang.benchmark.serving`` sends random token-id prompts (offline) at a fixed
concurrency.
Prints output tokens/s and P90 inter-token latency per placement, the dram/hbm
throughput ratio (target >= 0.97), and a last line of JSON. Needs a GPU.

    python benchmark/bench_serving_placements.py --model models/tiny-engram
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from engram_testing.server import build_tiny_model, sglang_server
from sglang_engram.protocol.server_config import engram_flags

from engram.placements import placement_named

ROOT = Path(__file__).resolve().parents[1]

TARGET_DRAM_OVER_HBM = 0.97


def run_placement(model: Path, placement: str, args: argparse.Namespace, work: Path) -> dict:
    ssd_dir = str(work / "ssd") if placement_named(placement).files else None
    flags = engram_flags(offload=placement, ssd_dir=ssd_dir)
    result_file = work / f"{placement}.jsonl"
    with sglang_server(model, *flags, log=work / f"{placement}.server.log") as url:
        cmd = [
            sys.executable,
            "-m",
            "sglang.benchmark.serving",
            "--backend",
            "sglang",
            "--base-url",
            url,
            "--model",
            str(model),
            "--tokenizer",
            str(model),
            # NOTE: random token ids, offline ("random" samples ShareGPT from the hub)
            "--dataset-name",
            "random-ids",
            "--tokenize-prompt",
            "--random-input-len",
            str(args.input_len),
            "--random-output-len",
            str(args.output_len),
            "--random-range-ratio",
            "0.8",
            "--num-prompts",
            str(args.num_prompts),
            "--max-concurrency",
            str(args.concurrency),
            "--output-file",
            str(result_file),
        ]
        subprocess.run(
            cmd,
            check=True,
            timeout=args.timeout_s,
            stdout=open(work / f"{placement}.bench.log", "w"),
            stderr=subprocess.STDOUT,
        )
    row = json.loads(result_file.read_text().splitlines()[-1])
    return {"output_tok_s": row["output_throughput"], "p90_itl_ms": row["p90_itl_ms"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        type=Path,
        default=ROOT / "models" / "tiny-engram",
        help="tiny Engram model directory (built if missing)",
    )
    parser.add_argument(
        "--placements",
        default="hbm,dram,ssd,off",
        help="comma-separated --engram-offload values to compare",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--num-prompts", type=int, default=512)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--timeout-s", type=int, default=1200)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("bench_serving_placements: needs a CUDA or ROCm GPU (none found)")
        return 2
    model = build_tiny_model(args.model)
    results = {}
    with tempfile.TemporaryDirectory(prefix="engram-bench-") as tmp:
        for placement in args.placements.split(","):
            results[placement] = run_placement(model, placement, args, Path(tmp))
            r = results[placement]
            print(
                f"{placement:>5}: {r['output_tok_s']:10.1f} output tok/s   "
                f"P90 ITL {r['p90_itl_ms']:7.2f} ms"
            )
    summary: dict = {"concurrency": args.concurrency, "placements": results}
    if "hbm" in results and "dram" in results:
        ratio = results["dram"]["output_tok_s"] / results["hbm"]["output_tok_s"]
        summary["dram_over_hbm"] = round(ratio, 4)
        summary["target"] = TARGET_DRAM_OVER_HBM
        print(f"dram/hbm output tok/s: {ratio:.3f} (target >= {TARGET_DRAM_OVER_HBM})")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
