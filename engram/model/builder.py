"""Build the tiny Engram model directory deterministically, without any download.

The tokenizer is the committed asset; every weight comes from one ``torch.Generator``
seeded with ``seed``, drawn in sorted-name order; the Engram rows are quantised with
:func:`engram.fp8.quantize_rows`. With ``engram_table_gib`` the tables are instead
random FP8 bytes of about that size in all (:mod:`engram.model.large_tables`), streamed
to the weights file chunk by chunk with bounded memory
(:mod:`engram.model.safetensors_stream`). Same options, same bytes, on every machine
with the same torch version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from engram.errors import EngramConfigError
from engram.fp8 import FP8_BLOCK, quantize_rows
from engram.model import large_tables
from engram.model.config import TinyEngramConfig
from engram.model.modeling import WEIGHTS_FILE, TinyEngramModel, engram_table_names
from engram.model.safetensors_stream import StreamedTensor, write_safetensors
from engram.model.tokenizer import (
    BOS_TOKEN_ID,
    EOS_TOKEN_ID,
    PAD_TOKEN_ID,
    asset_bytes,
    tokenizer_config,
)
from engram.primes import prime_layout
from engram.progress import progress_bar
from engram.tables import create_table
from engram.token_map import build_token_map

# NOTE: RMSNorm-like gains start near 1 and projections keep activations near unit scale,
# so the Engram value (unit-scale rows through wkv) is as large as the residual and
# turning Engram off visibly changes the logits.
GAIN_NOISE = 0.1
CONV_STD = 0.5
DEFAULT_VOCAB = 5000
HEAD_DIM = TinyEngramConfig.engram_head_dim  # the dataclass default: the tiny model's rows


@dataclass(frozen=True)
class BuildOptions:
    """What ``python -m engram.model build`` can vary (none of it is a placement)."""

    seed: int = 0
    num_hidden_layers: int = 4
    engram_layer_ids: tuple[int, ...] = (1, 3)
    engram_variant: str = "v41"
    engram_vocab_size: int = DEFAULT_VOCAB
    engram_max_ngram_size: int = 4
    engram_n_heads: int = 4
    # NOTE: None: tables from engram_vocab_size, quantised from normal draws; a size:
    # the prime search start is chosen for tables of about this many GiB in all, their
    # rows random FP8 bytes (streamed; engram_vocab_size must stay at its default).
    engram_table_gib: float | None = None

    def __post_init__(self) -> None:
        if self.engram_table_gib is None:
            return
        if self.engram_table_gib <= 0:
            raise EngramConfigError(
                f"engram_table_gib must be > 0 GiB, got {self.engram_table_gib:g}"
            )
        if self.engram_vocab_size != DEFAULT_VOCAB:
            raise EngramConfigError(
                "engram_table_gib and engram_vocab_size both set the table size; give one"
            )

    @property
    def prime_start(self) -> int:
        """Where the prime search starts (``engram_vocab_size`` of the config)."""
        if self.engram_table_gib is None:
            return self.engram_vocab_size
        n_cols = (self.engram_max_ngram_size - 1) * self.engram_n_heads
        layers = len(self.engram_layer_ids)
        return large_tables.vocab_for_table_gib(self.engram_table_gib, layers, n_cols, HEAD_DIM)


def make_config(
    options: BuildOptions, vocab_size: int, compressed_vocab_size: int
) -> TinyEngramConfig:
    """The config for ``options`` and the tokenizer's (compressed) vocab sizes; table
    sizes come from the prime layout."""
    primes = prime_layout(
        len(options.engram_layer_ids),
        options.engram_max_ngram_size,
        options.engram_n_heads,
        options.prime_start,
    )
    return TinyEngramConfig(
        vocab_size=vocab_size,
        engram_num_embeddings=tuple(sum(sum(order) for order in layer) for layer in primes),
        engram_compressed_vocab_size=compressed_vocab_size,
        num_hidden_layers=options.num_hidden_layers,
        bos_token_id=BOS_TOKEN_ID,
        eos_token_id=EOS_TOKEN_ID,
        pad_token_id=PAD_TOKEN_ID,
        engram_pad_token_id=PAD_TOKEN_ID,
        engram_variant=options.engram_variant,
        engram_layer_ids=options.engram_layer_ids,
        engram_max_ngram_size=options.engram_max_ngram_size,
        engram_n_heads=options.engram_n_heads,
        engram_vocab_size=options.prime_start,
    )


def init_weights(
    cfg: TinyEngramConfig, shapes: dict[str, tuple[int, ...]], seed: int
) -> dict[str, torch.Tensor]:
    """Every checkpoint tensor: ``shapes`` (the dense parameters) and the Engram rows,
    drawn from one generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    tensors = dense_weights(cfg, shapes, gen)
    for index, layer in enumerate(cfg.engram_layer_ids):
        rows = torch.randn((cfg.engram_num_embeddings[index], cfg.engram_head_dim), generator=gen)
        weight, scale = quantize_rows(rows)
        weight_name, scale_name = engram_table_names(layer)
        tensors[weight_name] = weight.view(torch.float8_e4m3fn)
        tensors[scale_name] = scale.view(torch.float8_e8m0fnu)
    return tensors


def dense_weights(
    cfg: TinyEngramConfig, shapes: dict[str, tuple[int, ...]], gen: torch.Generator
) -> dict[str, torch.Tensor]:
    """The dense parameters ``shapes``, drawn from ``gen`` in sorted-name order."""
    tensors: dict[str, torch.Tensor] = {}
    for name in sorted(shapes):
        shape = shapes[name]
        values = torch.randn(shape, generator=gen)
        leaf = name.rsplit(".", 2)[-2] if name.endswith(".weight") else name.rsplit(".", 1)[-1]
        if "norm" in leaf or leaf in ("q_weight", "k_weight"):
            values = 1.0 + GAIN_NOISE * values
        elif leaf == "conv_weight":
            values = CONV_STD * values
        elif leaf != "embed_tokens":
            values = values / math.sqrt(shape[-1])
        tensors[name] = values.to(cfg.dtype)
    return tensors


def streamed_tensors(
    cfg: TinyEngramConfig, shapes: dict[str, tuple[int, ...]], seed: int
) -> list[StreamedTensor]:
    """The checkpoint of a large-table build: the dense parameters as ``init_weights``
    draws them, then each Engram table's random rows, chunk by chunk."""
    dense = dense_weights(cfg, shapes, torch.Generator().manual_seed(seed))
    out = [StreamedTensor.of(name, dense[name]) for name in sorted(dense)]
    dim = cfg.engram_head_dim
    for index, layer in enumerate(cfg.engram_layer_ids):
        rows = cfg.engram_num_embeddings[index]
        weight_name, scale_name = engram_table_names(layer)
        out.append(
            StreamedTensor(
                weight_name,
                torch.float8_e4m3fn,
                (rows, dim),
                lambda r=rows, ly=layer: large_tables.weight_chunks(seed, ly, r, dim),
            )
        )
        out.append(
            StreamedTensor(
                scale_name,
                torch.float8_e8m0fnu,
                (rows, dim // FP8_BLOCK),
                lambda r=rows, ly=layer: large_tables.scale_chunks(seed, ly, r, dim),
            )
        )
    return out


BUILD_RECORD = "build_options.json"
# NOTE: package data: the model ``python -m engram.model train`` wrote (its
# train_report.json says how); ``build`` copies it unless asked for the random model.
TRAINED_MODEL = Path(__file__).resolve().parent.parent / "assets" / "tiny-engram"
TRAIN_REPORT = "train_report.json"


def built_with(out: str | Path, options: BuildOptions | None) -> bool:
    """Is ``out`` a complete build from exactly these options (and this tokenizer), or
    with ``None`` a copy of the bundled trained model?"""
    record = Path(out) / BUILD_RECORD
    try:
        return json.loads(record.read_text()) == _record(options)
    except (OSError, ValueError):
        return False


def copy_trained_model(out: str | Path) -> dict[Path, int]:
    """Write the bundled trained model (and its training report) to ``out``."""
    if not (TRAINED_MODEL / WEIGHTS_FILE).is_file():
        raise EngramConfigError(f"the trained tiny model is not bundled here ({TRAINED_MODEL})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in (*MODEL_FILES, TRAIN_REPORT):
        shutil.copyfile(TRAINED_MODEL / name, out / name)
    (out / BUILD_RECORD).write_text(json.dumps(_record(None), indent=1, sort_keys=True))
    return model_files(out)


def _record(options: BuildOptions | None) -> dict[str, object]:
    if options is None:
        weights = (TRAINED_MODEL / WEIGHTS_FILE).read_bytes()
        return {"trained_sha256": hashlib.sha256(weights).hexdigest()}
    fields = dataclasses.asdict(options)
    fields["engram_layer_ids"] = list(options.engram_layer_ids)
    if options.engram_table_gib is None:
        del fields["engram_table_gib"]  # NOTE: builds from before the option stay reusable
    return {"options": fields, "tokenizer_sha256": hashlib.sha256(asset_bytes()).hexdigest()}


def build_tiny_model(out: str | Path, options: BuildOptions | None = None) -> dict[Path, int]:
    """Write the model directory ``out``; returns each written file and its size."""
    from tokenizers import Tokenizer

    options = options or BuildOptions()
    token_map, compressed = build_token_map(Tokenizer.from_str(asset_bytes().decode()))
    cfg = make_config(options, token_map.numel(), compressed)
    shapes = _dense_shapes(cfg, token_map)
    if options.engram_table_gib is None:
        tensors = init_weights(cfg, shapes, options.seed)
    else:
        tensors = streamed_tensors(cfg, shapes, options.seed)
    write_model_dir(out, cfg, tensors, asset_bytes().decode())
    # NOTE: written last: its presence says the build above completed.
    (Path(out) / BUILD_RECORD).write_text(json.dumps(_record(options), indent=1, sort_keys=True))
    return model_files(out)


MODEL_FILES = ("config.json", WEIGHTS_FILE, "tokenizer.json", "tokenizer_config.json")


def write_model_dir(
    out: str | Path,
    cfg: TinyEngramConfig,
    tensors: dict[str, torch.Tensor] | list[StreamedTensor],
    tokenizer: str,
) -> None:
    """The HF-style directory the plugin serves: config, weights (tensors in memory, or
    streamed with a progress bar), tokenizer files."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    metadata = {"format": "pt"}
    if isinstance(tensors, dict):
        save_file(tensors, str(out / WEIGHTS_FILE), metadata=metadata)
    else:
        total = sum(t.nbytes for t in tensors)
        with progress_bar(total, f"writing {WEIGHTS_FILE}", unit="B", unit_scale=True) as bar:
            write_safetensors(out / WEIGHTS_FILE, tensors, metadata, on_bytes=bar.update)
    (out / "config.json").write_text(cfg.to_json())
    (out / "tokenizer.json").write_text(tokenizer)
    config_text = json.dumps(
        tokenizer_config(cfg.max_position_embeddings), indent=2, sort_keys=True
    )
    (out / "tokenizer_config.json").write_text(config_text + "\n")


def model_files(out: str | Path) -> dict[Path, int]:
    """Each file of a model directory and its size."""
    return {Path(out) / name: (Path(out) / name).stat().st_size for name in MODEL_FILES}


def _dense_shapes(cfg: TinyEngramConfig, token_map: torch.Tensor) -> dict[str, tuple[int, ...]]:
    """Name and shape of every parameter, read off a model whose Engram layers are off."""
    tables = {
        layer: create_table(
            "off", None, None, num_rows=cfg.engram_num_embeddings[i], head_dim=cfg.engram_head_dim
        )
        for i, layer in enumerate(cfg.engram_layer_ids)
    }
    skeleton = TinyEngramModel(cfg, tables, token_map)
    return {name: tuple(p.shape) for name, p in skeleton.state_dict().items()}
