"""``python -m engram.eval ablate|gate-scan``: the quality tools' command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from engram.cli import Parser, number, run, torch_device
from engram.cli_paths import directory, existing_file, output_file
from engram.files import atomic_write
from engram.model.builder import TRAINED_MODEL

# NOTE: "off" is a regime here, not a placement: the tables must hold rows to ablate.
EVAL_PLACEMENTS = ("hbm", "dram", "ssd")


def _samples(args: argparse.Namespace) -> list:
    from engram.eval.loading import check_engram_model
    from engram.eval.samples import SampleOptions, load_documents, make_samples
    from engram.model.tokenizer import load_tokenizer

    opts = SampleOptions(args.prompt_frac, args.seq_len, args.max_samples)
    check_engram_model(args.model)
    tokenizer = load_tokenizer(args.model)
    return make_samples(tokenizer, load_documents(args.data), opts)


def _ablate(args: argparse.Namespace) -> dict[str, object]:
    samples = _samples(args)
    if args.url:
        from engram.eval.remote import remote_exact_match

        result = remote_exact_match(args.url, samples, args.k, args.timeout, show_progress=True)
    else:
        from engram.eval.ablate import ablate
        from engram.eval.loading import open_model

        device = torch_device(args.device)
        with open_model(args.model, args.placement, args.ssd_dir, device) as model:
            result = ablate(model, samples, args.k, show_progress=True)
    print(result.table())
    return result.to_json()


def _gate_scan(args: argparse.Namespace) -> dict[str, object]:
    from engram.eval.gate_scan import gate_scan
    from engram.eval.loading import check_engram_model, open_model
    from engram.eval.samples import load_documents, segments
    from engram.model.tokenizer import load_tokenizer

    check_engram_model(args.model)
    tokenizer = load_tokenizer(args.model)
    segs = segments(tokenizer, load_documents(args.data), args.seq_len, args.max_segments)
    device = torch_device(args.device)
    with open_model(args.model, args.placement, args.ssd_dir, device) as model:
        scan = gate_scan(model, tokenizer, segs, show_progress=True)
    print(scan.table(args.top, args.min_count))
    return scan.to_json(args.top, args.min_count)


def parser() -> argparse.ArgumentParser:
    top = Parser(
        prog="python -m engram.eval",
        description="Quality tools for Engram models (the core library's reference model).",
    )
    sub = top.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, seq_help: str) -> None:
        p.add_argument(
            "--model",
            type=Path,
            default=TRAINED_MODEL,
            help="model directory (default: the bundled trained tiny model)",
        )
        p.add_argument(
            "--data",
            nargs="+",
            type=existing_file,
            metavar="FILE",
            help="UTF-8 text files, one document each (default: the held-out split of the "
            "stdlib corpus the tiny model was trained on)",
        )
        p.add_argument(
            "--placement",
            choices=EVAL_PLACEMENTS,
            default="hbm",
            help="where the tables live (results are identical in every one)",
        )
        p.add_argument(
            "--ssd-dir", type=directory, help="ssd placement files (default: a temp dir)"
        )
        p.add_argument(
            "--device", help="where the reference model runs (default: cuda when present)"
        )
        p.add_argument("--seq-len", type=number(at_least=2), default=128, help=seq_help)
        p.add_argument(
            "--json", type=output_file, metavar="FILE", help="also write the result as JSON"
        )

    abl = sub.add_parser(
        "ablate",
        help="cost of switching Engram off per phase",
        description="Cut documents into segments of --seq-len tokens, each a prompt (the first "
        "--prompt-frac) and its continuation, and score the continuation under four regimes: "
        "Engram in prefill and decode (both), at the prompt's positions only (prefill_only: "
        "a PD deployment whose decode runs --engram-offload off), at the continuation's only "
        "(decode_only), nowhere (none). Teacher-forced bits/token of the continuation and "
        "greedy exact match of its first K tokens. With --url, the same prompts go to a "
        "running server or PD router (SGLang's /generate with token ids, greedy) scored by "
        "exact match.",
    )
    common(abl, "tokens per segment (default 128, the training length)")
    abl.add_argument(
        "--prompt-frac",
        type=number(float, above=0, below=1),
        default=0.5,
        help="share of each segment that is prompt, inside (0, 1) (default 0.5)",
    )
    abl.add_argument(
        "--k", type=number(at_least=1), default=8, help="exact-match length (default 8)"
    )
    abl.add_argument(
        "--max-samples",
        type=number(at_least=1),
        default=200,
        help="segments scored, evenly spread (default 200)",
    )
    abl.add_argument("--url", help="score a running server's greedy completions instead")
    abl.add_argument(
        "--timeout", type=number(float, above=0), default=120.0, help="seconds per request (--url)"
    )
    abl.set_defaults(func=_ablate)

    scan = sub.add_parser(
        "gate-scan",
        help="n-grams with the strongest mean gate",
        description="Run the model over the documents (segments of --seq-len tokens), record "
        "the V4.1 gate at every position of every Engram layer, group the positions by the "
        "n-gram ending there (decoded text) and list, per layer, the n-grams with the "
        "strongest mean gate and their counts.",
    )
    common(scan, "tokens per segment (default 128)")
    scan.add_argument(
        "--top", type=number(at_least=1), default=20, help="n-grams listed per layer (default 20)"
    )
    scan.add_argument(
        "--min-count",
        type=number(at_least=1),
        default=5,
        help="only n-grams seen at least this often (default 5)",
    )
    scan.add_argument(
        "--max-segments",
        type=number(at_least=1),
        default=400,
        help="segments scanned, evenly spread (default 400)",
    )
    scan.set_defaults(func=_gate_scan)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def body() -> None:
        result = args.func(args)
        if args.json:
            atomic_write(args.json, json.dumps(result, indent=1) + "\n")
            print(f"wrote {args.json}")

    return run(body, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
