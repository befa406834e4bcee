"""Configuration of the tiny Engram model (a small Qwen3-like LM), as in ``config.json``."""

from __future__ import annotations

import functools
import json
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from engram.errors import EngramConfigError
from engram.layer import ENGRAM_VARIANTS, EngramLayerConfig
from engram.spec import EngramSpec

ARCHITECTURE = "EngramQwen3ForCausalLM"
MODEL_TYPE = "engram_qwen3"
_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass(frozen=True)
class TinyEngramConfig:
    """Every field is a ``config.json`` key; derived sizes are properties."""

    vocab_size: int
    engram_num_embeddings: tuple[int, ...]
    engram_compressed_vocab_size: int
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    torch_dtype: str = "bfloat16"
    bos_token_id: int = 0
    eos_token_id: int = 1
    pad_token_id: int = 2
    hc_mult: int = 1
    engram_variant: str = "v41"
    engram_layer_ids: tuple[int, ...] = (1, 3)
    engram_max_ngram_size: int = 4
    engram_n_heads: int = 4
    engram_head_dim: int = 64
    engram_vocab_size: int = 5000
    engram_pad_token_id: int = 2

    def __post_init__(self) -> None:
        if self.hc_mult != 1:
            raise EngramConfigError(
                f"the tiny model has a single residual stream: hc_mult must be 1, got {self.hc_mult}"
            )
        if self.engram_variant not in ENGRAM_VARIANTS:
            raise EngramConfigError(
                f"unknown engram_variant {self.engram_variant!r}; choose one of "
                f"{', '.join(ENGRAM_VARIANTS)}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise EngramConfigError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        bad = [i for i in self.engram_layer_ids if not 0 <= i < self.num_hidden_layers]
        if bad:
            raise EngramConfigError(
                f"engram_layer_ids {bad} are not layers of a {self.num_hidden_layers}-layer model"
            )
        if self.torch_dtype not in _DTYPES:
            raise EngramConfigError(
                f"torch_dtype must be one of {', '.join(_DTYPES)}, got {self.torch_dtype!r}"
            )
        if self.tie_word_embeddings:
            raise EngramConfigError("the tiny model keeps a separate lm_head: tie_word_embeddings")
        _ = self.spec  # validates the engram_* fields

    # ---- derived values -------------------------------------------------------------

    @functools.cached_property
    def spec(self) -> EngramSpec:
        """The hashing and table layout (validates the ``engram_*`` fields)."""
        return EngramSpec.from_hf_config(self.to_dict())

    def engram_layer_config(self) -> EngramLayerConfig:
        return EngramLayerConfig.from_spec(self.spec, self.engram_variant)

    @property
    def dtype(self) -> torch.dtype:
        return _DTYPES[self.torch_dtype]

    @property
    def kv_groups(self) -> int:
        """Query heads per key/value head (GQA)."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def engram_index(self, layer_id: int) -> int | None:
        """Position of ``layer_id`` among the Engram layers (hash column block), or None."""
        ids = self.engram_layer_ids
        return ids.index(layer_id) if layer_id in ids else None

    # ---- config.json ----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(
            {k: list(v) for k, v in asdict(self).items() if isinstance(v, tuple)},
            architectures=[ARCHITECTURE],
            model_type=MODEL_TYPE,
        )
        return out

    def to_json(self) -> str:
        """Stable ``config.json`` text (sorted keys), so builds are byte-identical."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> TinyEngramConfig:
        model_type = cfg.get("model_type", MODEL_TYPE)
        if model_type != MODEL_TYPE:
            raise EngramConfigError(
                f"config.json has model_type {model_type!r}; the tiny model is {MODEL_TYPE!r}"
            )
        # NOTE: the Engram fields are checked first so that a model without them gets the
        # library's standard "missing engram_*" message.
        EngramSpec.from_hf_config(cfg)
        names = {f.name for f in fields(cls)}
        missing = [f.name for f in fields(cls) if f.name not in cfg and f.default is MISSING]
        if missing:
            raise EngramConfigError(f"config.json is missing {', '.join(missing)}")
        values = {k: v for k, v in cfg.items() if k in names}
        for key in ("engram_layer_ids", "engram_num_embeddings"):
            values[key] = tuple(int(v) for v in values[key])
        return cls(**values)

    @classmethod
    def from_pretrained(cls, model_dir: str | Path) -> TinyEngramConfig:
        from engram.model.directory import read_config

        cfg = read_config(model_dir)
        try:
            return cls.from_dict(cfg)
        except EngramConfigError:
            raise
        except (TypeError, ValueError) as exc:  # NOTE: a field of the wrong type
            raise EngramConfigError(f"{model_dir}/config.json: {exc}") from None
