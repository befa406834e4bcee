"""``python -m engram.profile MODEL CORPUS... --out PROFILE``: count which rows of each
Engram (or PLE) table a corpus looks up, for ``--engram-seed-profile``.

``python -m engram.profile merge A B... --out C``: sum profiles of one model (served
profiles of ``--engram-profile-out``, TP shards' profiles, corpus profiles).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engram.cli import Parser, number, run
from engram.cli_paths import existing_file, output_file
from engram.errors import EngramInputError
from engram.model_config import read_model_config
from engram.profile.corpus import TEXT_SUFFIXES, corpus_files
from engram.profile.make import DEFAULT_TOP, make_profile
from engram.profile.model import load_tokenizer, profile_hash

MERGE = "merge"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m engram.profile",
        description=(
            "Tokenise a text corpus with a model's tokenizer, hash it through the model's "
            "n-gram hash and write each table's most looked-up rows with their counts. A "
            "server started with --engram-offload ssd --engram-seed-profile PROFILE fills "
            "its RAM row cache with them at start-up. Engram models (DeepSeek-V4.1, the "
            "tiny model) and Qwen3.8-Flash-Next's PLE tables."
        ),
        epilog=(
            f"'python -m engram.profile {MERGE} A.npz B.npz ... --out C.npz' sums profiles "
            f"of one model (see its --help); a model directory named {MERGE!r} is given as "
            f"./{MERGE}."
        ),
    )
    parser.add_argument("model", type=Path, help="model directory (config.json, tokenizer.json)")
    parser.add_argument(
        "corpus",
        nargs="+",
        type=Path,
        help="text files, or directories searched for "
        f"{', '.join(sorted('*' + s for s in TEXT_SUFFIXES))} files",
    )
    parser.add_argument("--out", type=output_file, required=True, help="profile file to write")
    parser.add_argument(
        "--top",
        type=number(int, at_least=1),
        default=DEFAULT_TOP,
        help="rows kept per table, the most looked-up (default %(default)s: 264 MiB of "
        "DeepSeek-V4.1 rows; a RAM cache share holding more takes a larger profile)",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        help="the server's --tokenizer-path when it is not the model directory",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def build_merge_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=f"python -m engram.profile {MERGE}",
        description=(
            "Sum the row counts of profiles of one model: served profiles "
            "(--engram-profile-out) of several servers or restarts, the per-rank files "
            "of a TP group, corpus profiles. Every profile must have been made through "
            "the same hash (model and tokenizer); one that was not is refused. A row a "
            "profile left out (below its own top) counts 0 there."
        ),
    )
    parser.add_argument("profiles", nargs="+", type=existing_file, help="profiles to sum")
    parser.add_argument("--out", type=output_file, required=True, help="profile file to write")
    parser.add_argument(
        "--top",
        type=number(int, at_least=1),
        help="rows kept per table, the most counted (default: the largest top of the inputs)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [MERGE]:
        return merge_main(argv[1:])
    args = build_parser().parse_args(argv)

    def body() -> None:
        if not args.model.is_dir():
            raise EngramInputError(f"model directory {args.model} does not exist; check the path")
        config = read_model_config(args.model)
        files = corpus_files(args.corpus)
        tokenizer = load_tokenizer(args.model, args.tokenizer)
        hasher, identity = profile_hash(args.model, config, tokenizer)
        profile = make_profile(
            hasher, tokenizer, files, top=args.top, show_progress=not args.quiet, identity=identity
        )
        profile.save(args.out)
        tables = ", ".join(
            f"layer {layer} {profile.rows[layer].size:,} rows" for layer in profile.rows
        )
        print(
            f"profiled {len(files):,} files, {profile.corpus['tokens']:,} tokens: "
            f"{tables} -> {args.out}",
            file=sys.stderr,
        )

    return run(body, args)


def merge_main(argv: list[str]) -> int:
    args = build_merge_parser().parse_args(argv)

    def body() -> None:
        from engram.profile.merge import merge_profiles

        merged = merge_profiles(args.profiles, args.top)
        merged.save(args.out)
        tables = ", ".join(
            f"layer {layer} {merged.rows[layer].size:,} rows" for layer in merged.rows
        )
        print(f"merged {len(args.profiles)} profiles: {tables} -> {args.out}", file=sys.stderr)

    return run(body, args)


if __name__ == "__main__":
    sys.exit(main())
