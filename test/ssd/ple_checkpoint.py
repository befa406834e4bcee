"""Small synthetic Qwen3.8-Flash-Next (``qwen4_exp``) checkpoints: random PLE tables under
upstream's tensor names and sharding, with the buffers (``layer_multipliers``,
``ngram_heads_vocab_sizes``, ``ngram_heads_offsets``) and table sizes that upstream's own
``Qwen4ExpNGramEmbedding`` computes for the config (built on the CPU in a TP-1 runtime
context), and a ``weight_scale`` other than 1 for fp8 tables."""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from engram.ssd.safetensors_files import TensorReader, checkpoint_entries
from test.core.upstream import tp_context, upstream_qwen4_exp

PLE_LAYER_IDS = (2, 4)  # 1-based, as the config writes them: decoder layers 1 and 3
KINDS = ("fp8", "bf16", "bf16-as-fp8")  # checkpoint dtype (and fp8 storage asked for)


def text_config(base: int, parts: int, *, fp8_storage: bool = False) -> dict[str, Any]:
    """A tiny ``text_config``: 4 n-gram heads of 16 values (``ple_embed_dim`` 64)."""
    config = {
        "model_type": "qwen4_exp_text",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "vocab_size": 1000,
        "eos_token_id": 3,
        "ple_layer_ids": list(PLE_LAYER_IDS),
        # NOTE: transformers' qwen4_exp config puts PLE on linear-attention layers only.
        "layer_types": ["full_attention"] + ["linear_attention"] * 3,
        "ple_embed_dim": 64,
        "ngram_size": 3,
        "heads_per_ngram": 2,
        "ngram_vocab_size_base": base,
        "make_ngram_vocab_size_divisible_by": 128,
        "split_ngram_parts": parts,
    }
    if fp8_storage:
        config["ple_embedding_dtype"] = "float8_e4m3fn"
    return config


def upstream_embedding(config: dict[str, Any], ple_layer_index: int) -> torch.nn.Module:
    """Upstream's ``Qwen4ExpNGramEmbedding`` for ``config`` (in the active context)."""
    qwen4_exp = upstream_qwen4_exp()
    text = qwen4_exp.Qwen4ExpTextConfig(**{k: v for k, v in config.items() if k != "model_type"})
    return qwen4_exp.Qwen4ExpNGramEmbedding(text, text.ple_embed_dim, ple_layer_index)


@functools.cache
def _buffers(config_json: str) -> dict[int, tuple[int, dict[str, torch.Tensor]]]:
    config = json.loads(config_json)
    from sglang.srt.runtime_context import use_context

    out = {}
    with use_context(tp_context()):
        for index, ple_id in enumerate(sorted(PLE_LAYER_IDS)):
            module = upstream_embedding(config, index)
            names = ("layer_multipliers", "ngram_heads_vocab_sizes", "ngram_heads_offsets")
            buffers = {name: getattr(module, name).clone() for name in names}
            out[ple_id - 1] = (module.ngram_embedding.org_vocab_size, buffers)
    return out


@dataclass(frozen=True)
class PleCheckpoint:
    directory: Path
    config: dict[str, Any]  # the text config
    tables: dict[int, torch.Tensor]  # decoder layer -> every row, in the checkpoint's dtype
    scale_bits: dict[int, int]  # decoder layer -> weight_scale's bf16 bits (1.0 if absent)

    @property
    def head_dim(self) -> int:
        return next(iter(self.tables.values())).shape[1]


def random_rows(rows: int, head_dim: int, dtype: torch.dtype) -> torch.Tensor:
    """Fresh random rows: fp8 of every byte value (NaN and -0 included), or bf16 spread
    over many exponents with a few NaNs, zeros of both signs and values past fp8's range."""
    if dtype == torch.float8_e4m3fn:
        return torch.randint(0, 256, (rows, head_dim), dtype=torch.uint8).view(dtype)
    values = torch.randn(rows, head_dim) * torch.exp2(torch.randint(-12, 10, (rows, 1)).float())
    flat = values.view(-1)
    picks = torch.randint(0, flat.numel(), (4, max(1, flat.numel() // 500)))
    flat[picks[0]], flat[picks[1]], flat[picks[2]] = float("nan"), 0.0, -0.0
    flat[picks[3]] = 1000.0  # past e4m3's 448: NaN in torch's fp8 downcast
    return values.to(torch.bfloat16)


def write_ple_checkpoint(
    directory: Path,
    kind: str = "fp8",
    *,
    base: int = 3000,
    parts: int = 512,
    scale: float | None = None,
) -> PleCheckpoint:
    """A two-file checkpoint with the PLE tables of ``text_config(base, parts)``, rows of
    ``kind`` (:data:`KINDS`); fp8 tables get a random ``weight_scale`` (or ``scale``)."""
    fp8 = kind == "fp8"
    config = text_config(base, parts, fp8_storage=kind == "bf16-as-fp8")
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    files: list[dict[str, torch.Tensor]] = [{}, {}]
    tables, scale_bits = {}, {}
    for layer, (rows, buffers) in _buffers(json.dumps(config, sort_keys=True)).items():
        prefix = f"model.language_model.layers.{layer}.ple.ple_embedding"
        for name, value in buffers.items():
            files[1][f"{prefix}.{name}"] = value
        table = random_rows(rows, 16, dtype)
        tables[layer], scale_bits[layer] = table, 0x3F80
        if fp8:
            value = scale if scale is not None else random.choice((0.0173, 0.37, 2.5, 3e-3))
            weight_scale = torch.tensor([value], dtype=torch.bfloat16)
            files[1][f"{prefix}.ngram_embedding.weight_scale"] = weight_scale
            scale_bits[layer] = int(weight_scale.view(torch.int16).item()) & 0xFFFF
        size = -(-rows // parts)
        for k in range(parts):
            # NOTE: shards past the last row are written empty ([0, D]), as a writer that
            # splits every table into ``parts`` shards does.
            shard = table[k * size : (k + 1) * size].contiguous()
            files[k % 2][f"{prefix}.ngram_embedding.shard_{k}.weight"] = shard
    files[0]["model.language_model.embed_tokens.weight"] = torch.randn(8, 64).to(torch.bfloat16)
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    for index, tensors in enumerate(files):
        save_file(tensors, str(directory / f"model-0000{index + 1}-of-00002.safetensors"))
    top = {
        "architectures": ["Qwen4ExpForConditionalGeneration"],
        "model_type": "qwen4_exp",
        "text_config": config,
    }
    (directory / "config.json").write_text(json.dumps(top))
    return PleCheckpoint(directory, config, tables, scale_bits)


def load_upstream_embeddings(
    ckpt: PleCheckpoint, context: Any, keep: Callable[[str], bool] = lambda name: True
) -> dict[int, nn.Module]:
    """Upstream's PLE embeddings built in ``context`` (a TP rank's), loaded by upstream's
    own ``Qwen4ExpForConditionalGeneration.load_weights`` with the checkpoint tensors
    ``keep`` lets through (as the plugin's weight filter does for SGLang's iterators)."""
    qwen4_exp = upstream_qwen4_exp()
    from sglang.srt.runtime_context import use_context

    top = qwen4_exp.Qwen4ExpConfig(**json.loads((ckpt.directory / "config.json").read_text()))
    host = qwen4_exp.Qwen4ExpForConditionalGeneration.__new__(
        qwen4_exp.Qwen4ExpForConditionalGeneration
    )
    nn.Module.__init__(host)
    # NOTE: the attributes load_weights reads, as Qwen3VLForConditionalGeneration's
    # constructor sets them (its config is the text config); the decoder layers hold only
    # their PLE embedding.
    host.config = top.text_config
    host.config.tie_word_embeddings = False
    host.language_model_only = True
    host.pp_group = SimpleNamespace(is_first_rank=True, is_last_rank=True)
    host.model = nn.Module()
    host.model.start_layer, host.model.end_layer = 0, host.config.num_hidden_layers
    host.model.layers = nn.ModuleList(nn.Module() for _ in range(host.config.num_hidden_layers))
    embeddings = {}
    with use_context(context):
        for index, layer in enumerate(sorted(ckpt.tables)):
            layer_module = host.model.layers[layer]
            layer_module.ple = nn.Module()
            layer_module.ple.ple_embedding = upstream_embedding(ckpt.config, index)
            embeddings[layer] = layer_module.ple.ple_embedding
        host.load_weights(
            (name, tensor) for name, tensor in _checkpoint_tensors(ckpt.directory) if keep(name)
        )
    return embeddings


def _checkpoint_tensors(directory: Path) -> Iterator[tuple[str, torch.Tensor]]:
    reader = TensorReader()
    for entry in checkpoint_entries(directory).values():
        yield entry.name, reader.whole(entry)
