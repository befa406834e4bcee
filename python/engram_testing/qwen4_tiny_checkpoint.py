"""A tiny random Qwen3.8-Flash-Next (``qwen4_exp``) checkpoint, as upstream reads one.

Four decoder layers (three Gated DeltaNet, then full attention), hyper-connections, a
four-expert MoE and two PLE layers (``ple_layer_ids`` 2 and 3: PLE sits on linear
attention layers only) whose n-gram tables hold a few thousand rows. Tensor names,
shapes and dtypes are the released checkpoint's as upstream's ``load_weights`` expects
them: the ``model.language_model.`` prefix, split ``in_proj_qkv``/``z``/``b``/``a``,
per-expert MoE weights, each PLE table in ``split_ngram_parts`` row shards
``...ngram_embedding.shard_{k}.weight`` (shard ``k`` = rows ``[k*ceil(rows/parts), ...)``)
with the buffers ``layer_multipliers``, ``ngram_heads_vocab_sizes``,
``ngram_heads_offsets`` and, for fp8 tables, the per-table bf16 ``weight_scale``.
``config.json`` has no QSA indexer fields (full attention runs as plain attention) and
``language_model_only`` (no vision tower). The tokenizer is the tiny Engram model's BPE
(``engram/assets``: 2,000 ids, eos 1).

Every value comes from one seeded ``torch.Generator``; PLE projections and its conv are
drawn large enough that switching PLE off changes the logits. NOTE: the checkpoint's
``layer_multipliers`` are drawn from the seed (odd, below upstream's overflow bound), not
computed by upstream's SplitMix64, so code that recomputes them instead of reading the
checkpoint hashes to other rows.

    python -m engram_testing.qwen4_tiny_checkpoint --out DIR [--ple-dtype fp8|bf16]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from safetensors.torch import save_file

from engram.cli import Parser, number, run
from engram.cli_paths import directory
from engram.model.safetensors_stream import write_safetensors
from engram.model.tokenizer import asset_bytes, tokenizer_config
from engram_testing import qwen4_tiny_weights as tiny_weights
from engram_testing.qwen4_tiny_options import MAX_POSITIONS, PLE_DTYPES, TinyQwen4Options

WEIGHTS_FILE = "model.safetensors"


def write_tiny_checkpoint(
    out: Path,
    *,
    ple_dtype: str = "fp8",
    seed: int = 0,
    ple_layer_ids: Sequence[int] = (2, 3),
    ngram_vocab_size_base: int = 200,
    split_ngram_parts: int = 8,
    stream_tables: bool = False,
) -> Path:
    """Write the checkpoint directory ``out`` (``config.json`` last: an interrupted build
    has none); returns ``out``. ``stream_tables``: the PLE tables written chunk by chunk,
    never whole in memory (tables of many GiB; other values than the default's)."""
    options = TinyQwen4Options(
        ple_dtype, seed, tuple(ple_layer_ids), ngram_vocab_size_base, split_ngram_parts
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").unlink(missing_ok=True)
    if stream_tables:
        tensors = tiny_weights.streamed_tensors(options)
        write_safetensors(out / WEIGHTS_FILE, tensors, metadata={"format": "pt"})
    else:
        weights = tiny_weights.draw_weights(options)
        save_file(weights, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / "tokenizer.json").write_bytes(asset_bytes())
    tokenizer = tokenizer_config(MAX_POSITIONS)
    (out / "tokenizer_config.json").write_text(
        json.dumps(tokenizer, indent=2, sort_keys=True) + "\n"
    )
    (out / "config.json").write_text(json.dumps(options.config, indent=2) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(
        prog="python -m engram_testing.qwen4_tiny_checkpoint",
        description="Write a tiny random Qwen3.8-Flash-Next (qwen4_exp) checkpoint with upstream's tensor names.",
    )
    parser.add_argument(
        "--out", type=directory, required=True, help="the checkpoint directory to write"
    )
    parser.add_argument(
        "--ple-dtype", choices=PLE_DTYPES, default="fp8", help="the PLE tables' dtype"
    )
    parser.add_argument(
        "--seed", type=number(int, at_least=0), default=0, help="seed of every weight"
    )
    args = parser.parse_args(argv)

    def body() -> None:
        write_tiny_checkpoint(args.out, ple_dtype=args.ple_dtype, seed=args.seed)
        print(
            f"wrote a tiny qwen4_exp checkpoint ({args.ple_dtype} PLE tables) to {args.out.resolve()}"
        )

    return run(body, args)


if __name__ == "__main__":
    raise SystemExit(main())
