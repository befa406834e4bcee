"""``python -m engram.model build``: write a model directory (the bundled trained model,
a random one, or the trained one with tables of a chosen size)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engram.cli import number
from engram.cli_paths import directory
from engram.errors import EngramInputError
from engram.layer import ENGRAM_VARIANTS

_DEFAULTS_NOTE = "defaults give the layout the plugin tests and docs use"

# The build options that only --random uses (BuildOptions' fields).
_RANDOM_OPTIONS = (
    "seed",
    "num_hidden_layers",
    "engram_layer_ids",
    "engram_variant",
    "engram_vocab_size",
    "engram_max_ngram_size",
    "engram_n_heads",
    "engram_table_gib",
)


def _build(args: argparse.Namespace) -> None:
    from engram.model.builder import (
        BuildOptions,
        build_tiny_model,
        built_with,
        copy_trained_model,
    )

    given = {k: v for k in _RANDOM_OPTIONS if (v := getattr(args, k)) is not None}
    if args.text_backbone:
        _build_text_backbone(args, given)
        return
    if given and not args.random:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise EngramInputError(
            f"{flags} {'shape' if len(given) > 1 else 'shapes'} only a --random build "
            "(without --random the bundled trained model is copied as it is); add --random "
            f"or drop {'them' if len(given) > 1 else 'it'}"
        )
    if "engram_table_gib" in given and "engram_vocab_size" in given:
        raise EngramInputError(
            "--engram-table-gib and --engram-vocab-size both set the table size; give one"
        )
    options = None
    if args.random:
        if "engram_layer_ids" in given:
            given["engram_layer_ids"] = tuple(given["engram_layer_ids"])
        options = BuildOptions(**given)
    kind = "random" if args.random else "trained"
    if args.reuse and built_with(args.out, options):
        print(f"reusing the {kind} tiny Engram model in {Path(args.out).resolve()}")
        return
    sizes = copy_trained_model(args.out) if options is None else build_tiny_model(args.out, options)
    _wrote(kind, args.out, sizes)


def _build_text_backbone(args: argparse.Namespace, given: dict[str, object]) -> None:
    from engram.model.text_backbone import (
        TextBackboneOptions,
        build_text_backbone,
        built_text_backbone,
    )

    if others := [k for k in given if k != "engram_table_gib"]:
        flags = ", ".join("--" + k.replace("_", "-") for k in others)
        raise EngramInputError(
            f"--text-backbone keeps the trained model's shape and takes only "
            f"--engram-table-gib; drop {flags}"
        )
    if "engram_table_gib" not in given:
        raise EngramInputError("--text-backbone needs --engram-table-gib G, the tables' size")
    options = TextBackboneOptions(float(given["engram_table_gib"]))  # type: ignore[arg-type]
    kind = "text-backbone"
    if args.reuse and built_text_backbone(args.out, options):
        print(f"reusing the {kind} tiny Engram model in {Path(args.out).resolve()}")
        return
    _wrote(kind, args.out, build_text_backbone(args.out, options))


def _wrote(kind: str, out: Path, sizes: dict[Path, int]) -> None:
    print(f"wrote the {kind} tiny Engram model to {Path(out).resolve()}")
    for path, size in sizes.items():
        print(f"  {path.name:<24} {size:>12,} bytes")
    print(f"  {'total':<24} {sum(sizes.values()):>12,} bytes")


def add_build_command(sub: Any) -> None:
    """The ``build`` subcommand on ``sub`` (an ``add_subparsers`` result)."""
    build = sub.add_parser(
        "build",
        help="write the model directory",
        description="Write config.json, model.safetensors, tokenizer.json and "
        "tokenizer_config.json: by default the bundled trained model (with its "
        "train_report.json); with --random a model of random weights, where the same options "
        "give byte-identical files and the " + _DEFAULTS_NOTE + "; with --text-backbone "
        "the trained model with tables of --engram-table-gib G GiB (a benchmark's size).",
    )
    build.add_argument("--out", required=True, type=directory, help="directory to write")
    build.add_argument(
        "--reuse",
        action="store_true",
        help="keep OUT as it is when it already holds a build with these options (else build)",
    )
    kind = build.add_mutually_exclusive_group()
    kind.add_argument(
        "--random",
        action="store_true",
        help="random weights, deterministic for the options below (which need it)",
    )
    kind.add_argument(
        "--text-backbone",
        action="store_true",
        help="the trained model with tables of --engram-table-gib G GiB: its trained rows "
        "where the larger hash sends the n-grams of its training text (this Python's "
        "stdlib), so it writes what the trained model writes",
    )
    # NOTE: None = not given, so that an option without --random is refused (all but
    # --engram-table-gib with --text-backbone); the defaults are BuildOptions' and the help
    # states them.
    build.add_argument("--seed", type=number(at_least=0), help="weight seed (default 0)")
    build.add_argument(
        "--num-hidden-layers", type=number(at_least=1), help="decoder layers (default 4)"
    )
    build.add_argument(
        "--engram-layer-ids",
        type=number(at_least=0),
        nargs="+",
        metavar="ID",
        help="decoder layers that start with an Engram layer (default 1 3)",
    )
    build.add_argument(
        "--engram-variant",
        choices=list(ENGRAM_VARIANTS),
        help="v41: DeepSeek-V4.1 gate; paper: per-stream keys + ShortConv (default v41)",
    )
    build.add_argument(
        "--engram-vocab-size",
        type=number(at_least=2),
        help="where the prime search starts: each layer gets (N - 1) x heads hash buckets of "
        "about this many rows (default 5000)",
    )
    build.add_argument(
        "--engram-table-gib",
        type=number(float, above=0),
        metavar="G",
        help="Engram tables of about G GiB in all, written in one streaming pass with "
        "bounded memory: rows of random FP8 bytes (--random; sets the prime search start "
        "instead of --engram-vocab-size) or the trained rows (--text-backbone); e.g. 8 for "
        "tables no cache holds",
    )
    build.add_argument(
        "--engram-max-ngram-size",
        type=number(at_least=2, power_of_two=True),
        help="N, the longest n-gram: 2, 4 or 8 (default 4; SGLang's hash kernel needs a "
        "power of two)",
    )
    build.add_argument(
        "--engram-n-heads",
        type=number(at_least=1, power_of_two=True),
        help="hash heads per n-gram order: 1, 2, 4, 8 ... (default 4; SGLang's hash kernel "
        "needs a power of two)",
    )
    build.set_defaults(func=_build)
