"""A tiny random DeepSeek-V4.1 checkpoint (``model_type: deepseek_v41``), as upstream
SGLang reads one: four layers whose attention is all sliding-window (every
``compress_ratios`` entry 0, the only kind SGLang's CPU engine runs with the plugin's
stand-ins), a four-expert MoE, hyper-connections, and Engram on layers 1 and 2 with
tables of about twelve thousand rows each. Tensor names, shapes and dtypes are the
released checkpoint's (``dsv41_tiny_weights``): bf16 dense weights, Engram rows e4m3
with ue8m0 exponents. The tokenizer is the tiny Engram model's BPE (``engram/assets``:
2,000 ids) with DeepSeek's chat special tokens added (SGLang's DeepSeek-V4.1 chat encoder
needs them; bos and eos are DeepSeek's), shipped so that upstream's compressed token map
of it is the config's ``engram_compressed_vocab_size``. Every value comes from one seed.

    python -m engram_testing.dsv41_tiny_checkpoint --out DIR [--seed N]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from safetensors.torch import save_file

from engram.cli import Parser, number, run
from engram.cli_paths import directory
from engram_testing import dsv41_tiny_weights as tiny

WEIGHTS_FILE = "model.safetensors"


def write_tiny_checkpoint(out: Path, *, seed: int = 0) -> Path:
    """Write the checkpoint directory ``out`` (``config.json`` last: an interrupted build
    has none); returns ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").unlink(missing_ok=True)
    save_file(tiny.draw_weights(seed), str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    for name, text in tiny.tokenizer_files().items():
        (out / name).write_text(text)
    (out / "config.json").write_text(json.dumps(tiny.config(), indent=2) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(
        prog="python -m engram_testing.dsv41_tiny_checkpoint",
        description="Write a tiny random DeepSeek-V4.1 (deepseek_v41) checkpoint with "
        "the released checkpoint's tensor names.",
    )
    parser.add_argument(
        "--out", type=directory, required=True, help="the checkpoint directory to write"
    )
    parser.add_argument(
        "--seed", type=number(int, at_least=0), default=0, help="seed of every weight"
    )
    args = parser.parse_args(argv)

    def body() -> None:
        write_tiny_checkpoint(args.out, seed=args.seed)
        print(f"wrote a tiny deepseek_v41 checkpoint to {args.out.resolve()}")

    return run(body, args)


if __name__ == "__main__":
    raise SystemExit(main())
