"""``python -m engram.convert --checkpoint DIR --out SSD_DIR``: n-gram tables to SSD tables.

Reads the n-gram tables of a safetensors checkpoint (DeepSeek-V4.1's Engram
``layers.{L}.engram.embed.weight`` / ``.scale``, or with a ``model.`` prefix;
Qwen3.8-Flash-Next's PLE ``...layers.{L}.ple.ple_embedding.ngram_embedding.shard_{k}.weight``)
and writes the SSD layout that ``--engram-offload ssd`` serves from. See
:mod:`engram.ssd.converter`. Ctrl-C (or any kill) leaves the tables that were there valid and the new ones resumable: it prints
"interrupted; run the same command to resume" and exits with 130.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engram.cli import Parser, number, run
from engram.cli_paths import directory
from engram.files import MIB
from engram.ssd.converter import convert_checkpoint
from engram.ssd.layout import DEFAULT_CHUNK_BYTES

INTERRUPTED = "interrupted; run the same command to resume"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m engram.convert",
        description=(
            "Convert the n-gram tables of a safetensors checkpoint (DeepSeek-V4.1 Engram, "
            "Qwen3.8-Flash-Next PLE) into the SSD layout "
            "(4 KiB-aligned rows, a hash per 4 KiB block, source identity). New tables are "
            "written beside the old ones and swapped in when complete and verified; an "
            "interrupted run (exit 130) resumes where it stopped; a table already "
            "converted from these rows is reused, one from other rows converted again."
        ),
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="HF checkpoint directory holding *.safetensors (and config.json)",
    )
    parser.add_argument(
        "--out",
        type=directory,
        required=True,
        help="output directory (created; one layer{L}/ table per n-gram layer)",
    )
    parser.add_argument(
        "--chunk-mib",
        type=number(float, above=0),
        default=DEFAULT_CHUNK_BYTES / MIB,
        help="checksum and resume granularity in MiB (default %(default)g)",
    )
    parser.add_argument(
        "--no-space-check",
        action="store_true",
        help="skip the free-space check before writing (for filesystems whose "
        "free space statfs reports wrongly); a full disk still stops cleanly",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="re-read the output and check every block's hash at the end",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> None:
        convert_checkpoint(
            args.checkpoint,
            args.out,
            chunk_bytes=max(1, int(args.chunk_mib * MIB)),
            check_space=not args.no_space_check,
            verify=args.verify,
            show_progress=not args.quiet,
        )

    return run(body, args, interrupted=INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
