"""Command line of the tiny Engram model: build it, generate with it, retrain its tokenizer."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from engram.cli import Parser, number, run, torch_device
from engram.cli_paths import directory, existing_file, output_file
from engram.errors import EngramInputError
from engram.model.build_command import add_build_command
from engram.model.builder import TRAINED_MODEL
from engram.tables import PLACEMENTS


def _generate(args: argparse.Namespace) -> None:
    from engram.model.modeling import TinyEngramModel
    from engram.model.tokenizer import load_tokenizer

    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError:  # NOTE: bytes the terminal's locale could not decode
        raise EngramInputError("the prompt is not UTF-8 text; pass it as UTF-8") from None
    tokenizer = load_tokenizer(args.model)
    prompt = tokenizer.encode(args.prompt).ids
    if not prompt:
        raise EngramInputError("the prompt is empty")
    device = torch_device(args.device)
    with tempfile.TemporaryDirectory(prefix="engram-ssd-") as tmp:
        model = TinyEngramModel.from_pretrained(
            args.model, args.placement, args.ssd_dir or tmp, device
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
        device=torch_device(args.device),
    )
    report = train(args.out, options)
    bits = report["heldout_bits_per_token"]
    print(f"held-out bits/token: engram {bits['engram']:.4f}, baseline {bits['baseline']:.4f}")
    print(f"wrote {Path(args.out).resolve()} (train_report.json has the details)")


def _train_tokenizer(args: argparse.Namespace) -> None:
    from engram.model.tokenizer import train_tokenizer

    files = sorted(str(p) for p in args.files)
    Path(args.out).write_text(train_tokenizer(files, args.vocab_size))
    print(f"wrote {args.out} ({Path(args.out).stat().st_size:,} bytes) from {len(files)} files")


def parser() -> argparse.ArgumentParser:
    top = Parser(
        prog="python -m engram.model",
        description="The tiny Engram model: a 4-layer Qwen3-like LM (hidden 128) with "
        "Engram layers, trained on the Python standard library or built with random weights, "
        "offline and deterministically.",
    )
    sub = top.add_subparsers(dest="command", required=True)

    add_build_command(sub)

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
    gen.add_argument(
        "--placement", choices=list(PLACEMENTS), default="hbm", help="where the tables live"
    )
    gen.add_argument(
        "--ssd-dir", type=directory, help="ssd placement files (default: a temporary directory)"
    )
    gen.add_argument(
        "--max-new-tokens", type=number(at_least=1), default=16, help="tokens to generate"
    )
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
    fit.add_argument("--out", required=True, type=directory, help="model directory to write")
    fit.add_argument(
        "--seed", type=number(at_least=0), default=0, help="seed of weights and batches"
    )
    fit.add_argument(
        "--steps", type=number(at_least=1), default=800, help="steps per model, 8 x 128 tokens each"
    )
    fit.add_argument(
        "--minutes",
        type=number(float, above=0),
        default=20.0,
        help="wall-time cap for both models",
    )
    fit.add_argument("--threads", type=number(at_least=1), default=2, help="torch CPU threads")
    fit.add_argument("--device", help="cpu or cuda (default: cuda when present)")
    fit.set_defaults(func=_train)

    train = sub.add_parser(
        "train-tokenizer",
        help="retrain the byte-level BPE asset",
        description="Train the byte-level BPE (specials <|bos|> <|eos|> <|pad|> = ids "
        "0, 1, 2) on FILES, sorted by name; see engram/assets/README.md.",
    )
    train.add_argument("files", nargs="+", type=existing_file, help="training text files")
    train.add_argument("--out", required=True, type=output_file, help="tokenizer.json to write")
    train.add_argument(
        "--vocab-size",
        type=number(at_least=259),
        default=2000,
        help="tokens in the vocabulary (the 256 bytes and 3 specials at least)",
    )
    train.set_defaults(func=_train_tokenizer)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run(lambda: args.func(args), args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
