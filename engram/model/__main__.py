"""Command line of the tiny Engram model: build it, generate with it, retrain its tokenizer."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from engram.errors import EngramError, EngramInputError
from engram.model.builder import TRAINED_MODEL
from engram.module import ENGRAM_VARIANTS
from engram.tables import PLACEMENTS

_DEFAULTS_NOTE = "defaults give the layout the plugin tests and docs use"


def _build(args: argparse.Namespace) -> None:
    from engram.model.builder import (
        BuildOptions,
        build_tiny_model,
        built_with,
        copy_trained_model,
    )

    options = None
    if args.random:
        options = BuildOptions(
            seed=args.seed,
            num_hidden_layers=args.num_hidden_layers,
            engram_layer_ids=tuple(args.engram_layer_ids),
            engram_variant=args.engram_variant,
            engram_vocab_size=args.engram_vocab_size,
            engram_max_ngram_size=args.engram_max_ngram_size,
            engram_n_heads=args.engram_n_heads,
        )
    kind = "random" if args.random else "trained"
    if args.reuse and built_with(args.out, options):
        print(f"reusing the {kind} tiny Engram model in {Path(args.out).resolve()}")
        return
    sizes = copy_trained_model(args.out) if options is None else build_tiny_model(args.out, options)
    print(f"wrote the {kind} tiny Engram model to {Path(args.out).resolve()}")
    for path, size in sizes.items():
        print(f"  {path.name:<24} {size:>12,} bytes")
    print(f"  {'total':<24} {sum(sizes.values()):>12,} bytes")


def _generate(args: argparse.Namespace) -> None:
    from engram.model.modeling import TinyEngramModel
    from engram.model.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(args.model)
    prompt = tokenizer.encode(args.prompt).ids
    if not prompt:
        raise EngramInputError("the prompt is empty")
    with tempfile.TemporaryDirectory(prefix="engram-ssd-") as tmp:
        model = TinyEngramModel.from_pretrained(
            args.model, args.placement, args.ssd_dir or tmp, args.device or _device()
        )
        try:
            new = model.generate(prompt, args.max_new_tokens)
        finally:
            model.close()
    print(tokenizer.decode(prompt + new))


def _train(args: argparse.Namespace) -> None:
    from engram.model.train import TrainOptions, train

    options = TrainOptions(
        seed=args.seed,
        steps=args.steps,
        minutes=args.minutes,
        threads=args.threads,
        device=args.device or _device(),
    )
    report = train(args.out, options)
    bits = report["heldout_bits_per_token"]
    print(f"held-out bits/token: engram {bits['engram']:.4f}, baseline {bits['baseline']:.4f}")
    print(f"wrote {Path(args.out).resolve()} (train_report.json has the details)")


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _train_tokenizer(args: argparse.Namespace) -> None:
    from engram.model.tokenizer import train_tokenizer

    files = sorted(str(p) for p in args.files)
    Path(args.out).write_text(train_tokenizer(files, args.vocab_size))
    print(f"wrote {args.out} ({Path(args.out).stat().st_size:,} bytes) from {len(files)} files")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m engram.model",
        description="The tiny Engram model: a 4-layer Qwen3-like LM (hidden 128) with "
        "Engram layers, trained on the Python standard library or built with random weights, "
        "offline and deterministically.",
    )
    sub = top.add_subparsers(dest="command", required=True)

    build = sub.add_parser(
        "build",
        help="write the model directory",
        description="Write config.json, model.safetensors, tokenizer.json and "
        "tokenizer_config.json: by default the bundled trained model (with its "
        "train_report.json); with --random a model of random weights, where the same options "
        "give byte-identical files and the "
        + _DEFAULTS_NOTE
        + ".",
    )
    build.add_argument("--out", required=True, type=Path, help="directory to write")
    build.add_argument(
        "--reuse",
        action="store_true",
        help="keep OUT as it is when it already holds a build with these options (else build)",
    )
    build.add_argument(
        "--random",
        action="store_true",
        help="random weights, deterministic for the options below (which need it)",
    )
    build.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    build.add_argument(
        "--num-hidden-layers", type=int, default=4, help="decoder layers (default 4)"
    )
    build.add_argument(
        "--engram-layer-ids",
        type=int,
        nargs="+",
        default=[1, 3],
        metavar="ID",
        help="decoder layers that start with an Engram layer (default 1 3)",
    )
    build.add_argument(
        "--engram-variant",
        choices=list(ENGRAM_VARIANTS),
        default="v41",
        help="v41: DeepSeek-V4.1 gate; paper: per-stream keys + ShortConv",
    )
    build.add_argument(
        "--engram-vocab-size",
        type=int,
        default=5000,
        help="where the prime search starts: each layer gets (N - 1) x heads hash buckets of "
        "about this many rows (default 5000)",
    )
    build.add_argument(
        "--engram-max-ngram-size",
        type=int,
        default=4,
        help="N, the longest n-gram (default 4; SGLang's hash kernel needs a power of two)",
    )
    build.add_argument(
        "--engram-n-heads",
        type=int,
        default=4,
        help="hash heads per n-gram order (default 4; SGLang's hash kernel needs a power of two)",
    )
    build.set_defaults(func=_build)

    gen = sub.add_parser(
        "generate",
        help="greedy generation on the CPU",
        description="Load a model with its Engram tables in PLACEMENT (off: without Engram) "
        "and print the prompt with its greedy continuation, from the core library's reference "
        "model: no GPU, no SGLang.",
    )
    gen.add_argument("prompt", nargs="?", default="def ", help="prompt text (default 'def ')")
    gen.add_argument(
        "--model",
        type=Path,
        default=TRAINED_MODEL,
        help="model directory (default: the bundled trained model)",
    )
    gen.add_argument("--placement", choices=list(PLACEMENTS), default="hbm")
    gen.add_argument(
        "--ssd-dir", type=Path, help="ssd placement files (default: a temporary directory)"
    )
    gen.add_argument("--max-new-tokens", type=int, default=16)
    gen.add_argument("--device", help="cpu or cuda (default: cuda when present)")
    gen.set_defaults(func=_generate)

    fit = sub.add_parser(
        "train",
        help="train the model and its no-Engram baseline on the Python standard library",
        description="Train the tiny Engram model and a baseline without Engram (same dense "
        "layers, recipe, batches and steps) on this interpreter's stdlib sources and pydoc "
        "topics (held-out files chosen by a hash of their name), retraining the tokenizer on "
        "the train split. Writes the model directory and train_report.json (held-out "
        "bits/token of both, tokens, wall time, seed). The step count is the budget: the same "
        "seed on the same machine gives the same files. --minutes only caps the wall time "
        "(half per model; the baseline then stops at the Engram model's step): on an idle "
        "2-core machine the default steps take well under the default cap, a capped run is "
        "marked stopped_early in the report.",
    )
    fit.add_argument("--out", required=True, type=Path, help="model directory to write")
    fit.add_argument("--seed", type=int, default=0, help="seed of weights and batches (0)")
    fit.add_argument("--steps", type=int, default=800, help="steps per model, 8 x 128 tokens each")
    fit.add_argument(
        "--minutes", type=float, default=20.0, help="wall-time cap for both models (20)"
    )
    fit.add_argument("--threads", type=int, default=2, help="torch CPU threads (2)")
    fit.add_argument("--device", help="cpu or cuda (default: cuda when present)")
    fit.set_defaults(func=_train)

    train = sub.add_parser(
        "train-tokenizer",
        help="retrain the byte-level BPE asset",
        description="Train the byte-level BPE (specials <|bos|> <|eos|> <|pad|> = ids "
        "0, 1, 2) on FILES, sorted by name; see engram/assets/README.md.",
    )
    train.add_argument("files", nargs="+", type=Path, help="training text files")
    train.add_argument("--out", required=True, type=Path, help="tokenizer.json to write")
    train.add_argument("--vocab-size", type=int, default=2000)
    train.set_defaults(func=_train_tokenizer)
    return top


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except EngramError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
