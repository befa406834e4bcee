"""The tiny Engram model in torch: loading, forward with a KV cache, greedy generation.

A Qwen3 decoder whose Engram layers add their gated rows to the residual at the start of
the layer, before ``input_layernorm``. Row ids come from :class:`engram.NgramHasher`; the
per-sequence :class:`DecodeState` carries the last ``N - 1`` tokens, so decoding step by
step hashes exactly as one pass over the whole sequence.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from engram.errors import EngramConfigError, EngramInputError
from engram.hashing import NgramHasher
from engram.layer import EngramState, make_engram
from engram.model.config import TinyEngramConfig
from engram.model.directory import model_file
from engram.model.layers import MLP, Attention, LayerCache, RMSNorm
from engram.model.tokenizer import load_tokenizer
from engram.placements import placement_named
from engram.ssd.converter import convert_checkpoint
from engram.ssd.directory import table_dir
from engram.tables import EngramTable, create_table
from engram.token_map import build_token_map

logger = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"


def engram_table_names(layer_id: int) -> tuple[str, str]:
    """Checkpoint names of one Engram layer's FP8 rows and their ue8m0 scales."""
    prefix = f"model.layers.{layer_id}.engram.embed"
    return f"{prefix}.weight", f"{prefix}.scale"


@dataclass
class DecodeState:
    """What one sequence carries between forward calls."""

    layers: list[LayerCache]
    engram: dict[int, EngramState]
    length: int = 0
    # NOTE: the last N - 1 token ids (fewer at the start): all the hasher needs.
    tail: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TinyEngramConfig, layer_id: int, table: EngramTable | None):
        super().__init__()
        self.engram = None
        if table is not None:
            self.engram = make_engram(cfg.engram_layer_config(), table, dtype=cfg.dtype)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg.dtype)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg.dtype)
        self.mlp = MLP(cfg)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        row_ids: torch.Tensor | None,
        cache: LayerCache | None,
        engram_state: EngramState | None,
        engram_on: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``engram_on`` [T] (None: all on) says at which positions the Engram layer adds
        its value; elsewhere it is the identity, as with the ``off`` placement."""
        active = engram_on is None or bool(engram_on.any())
        if self.engram is not None and row_ids is not None and active:
            # hc_mult is 1: the residual is one stream, [..., T, 1, hidden] for the gate.
            y = self.engram(x.unsqueeze(-2), row_ids, state=engram_state).squeeze(-2)
            x = y if engram_on is None else torch.where(engram_on.unsqueeze(-1), y, x)
        x = x + self.self_attn(self.input_layernorm(x), positions, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: TinyEngramConfig, tables: dict[int, EngramTable]):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, dtype=cfg.dtype)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, i, tables.get(i)) for i in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg.dtype)


class TinyEngramModel(nn.Module):
    """Causal LM; parameter names are the checkpoint names (Engram rows live in tables)."""

    def __init__(
        self, config: TinyEngramConfig, tables: dict[int, EngramTable], token_map: torch.Tensor
    ):
        super().__init__()
        missing = sorted(set(config.engram_layer_ids) - set(tables))
        if missing:
            raise EngramConfigError(f"no Engram table given for layers {missing}")
        self.config = config
        self.tables = tables
        self.hasher = NgramHasher(config.spec, token_map, config.engram_pad_token_id)
        self.model = Backbone(config, tables)
        self.lm_head = nn.Linear(
            config.hidden_size, config.vocab_size, bias=False, dtype=config.dtype
        )

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | Path,
        placement: str = "hbm",
        ssd_dir: str | Path | None = None,
        device: torch.device | str = "cpu",
    ) -> TinyEngramModel:
        """Load a directory written by ``python -m engram.model build`` onto ``device``; the
        Engram rows go to tables of ``placement``. ``ssd`` tables live under ``ssd_dir``
        exactly as ``python -m engram.convert --checkpoint model_dir --out ssd_dir`` and
        the server lay them out: a directory converted by either is reused, and one of
        other rows, damaged or half written is converted (resumed) first."""
        model_dir = Path(model_dir)
        cfg = TinyEngramConfig.from_pretrained(model_dir)
        token_map, _ = build_token_map(load_tokenizer(model_dir))
        if placement_named(placement).files:
            if ssd_dir is None:
                raise EngramConfigError(
                    f"the {placement} placement needs an ssd_dir for its table files"
                )
            convert_checkpoint(
                model_dir,
                Path(ssd_dir),
                log=logger.info,
                show_progress=False,
                warn=logger.warning,  # NOTE: a table converted again is said on any console
            )
        weights = model_file(model_dir, WEIGHTS_FILE)
        try:
            with safe_open(str(weights), framework="pt") as f:
                tables = {
                    layer: _open_table(f, cfg, layer, placement, ssd_dir, device)
                    for layer in cfg.engram_layer_ids
                }
                model = cls(cfg, tables, token_map)
                dense = {k: f.get_tensor(k) for k in f.keys() if ".engram.embed." not in k}
        except SafetensorError as exc:  # NOTE: a damaged file, or a tensor missing from it
            raise EngramConfigError(
                f"{weights} cannot be read ({exc}); rebuild the model"
            ) from None
        try:
            model.load_state_dict(dense, strict=True)
        except RuntimeError as exc:  # NOTE: tensors of other names or shapes than config.json's
            last = str(exc).strip().splitlines()[-1].strip()
            raise EngramConfigError(
                f"{weights} does not match {model_dir}/config.json ({last}); rebuild the "
                "model or fix config.json"
            ) from None
        return model.to(device).eval()

    def new_state(self) -> DecodeState:
        return DecodeState(
            layers=[LayerCache() for _ in range(self.config.num_hidden_layers)],
            engram={layer: EngramState() for layer in self.config.engram_layer_ids},
        )

    def run(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        row_ids: torch.Tensor,
        state: DecodeState | None = None,
        engram_on: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (model dtype) of ``ids`` [..., T] at ``positions`` [T] with their hashed
        ``row_ids`` [..., T, L, C]: the differentiable core that training calls with batches
        and :meth:`forward` with one sequence and its ``state``."""
        x = self.model.embed_tokens(ids)
        for i, layer in enumerate(self.model.layers):
            index = self.config.engram_index(i)
            x = layer(
                x,
                positions,
                row_ids[..., index, :] if index is not None else None,
                state.layers[i] if state is not None else None,
                state.engram.get(i) if state is not None else None,
                engram_on,
            )
        return self.lm_head(self.model.norm(x))

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor | Sequence[int],
        state: DecodeState | None = None,
        engram_on: torch.Tensor | bool = True,
    ) -> torch.Tensor:
        """fp32 logits [T, vocab] of ``input_ids`` [T]; with ``state`` they continue the
        sequence it holds (which is then extended), without it they start a new one.
        ``engram_on`` (bool, or bool [T] per position) switches the Engram layers off where
        false: the ablation regimes of :mod:`engram.eval`."""
        ids = torch.as_tensor(input_ids, dtype=torch.int64).reshape(-1)
        if ids.numel() == 0:
            raise EngramInputError("input_ids is empty")
        start = state.length if state is not None else 0
        # NOTE: hashing stays on the CPU (it needs only the ids); the rest runs where the
        # weights are.
        device = self.lm_head.weight.device
        positions = torch.arange(start, start + ids.numel(), device=device)
        row_ids = self.hasher.hash(ids, state.tail if state is not None else None).to(device)
        mask = torch.as_tensor(engram_on, dtype=torch.bool).expand(ids.numel())
        mask = None if bool(mask.all()) else mask.to(device)
        logits = self.run(ids.to(device), positions, row_ids, state, mask)
        if state is not None:
            state.length += ids.numel()
            state.tail = torch.cat([state.tail, ids])[-(self.hasher.window - 1) :]
        return logits.float()

    @torch.inference_mode()
    def generate(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        *,
        use_cache: bool = True,
        prefill_engram: bool = True,
        decode_engram: bool = True,
    ) -> list[int]:
        """Greedy continuation of ``prompt_ids`` (new tokens only; stops after eos).

        ``use_cache=False`` recomputes the whole sequence every step (the reference the
        incremental path is tested against). ``prefill_engram`` / ``decode_engram`` switch
        the Engram layers at the prompt's / the new tokens' positions (a PD deployment
        whose decode side runs ``off`` is ``decode_engram=False``).
        """
        out: list[int] = []
        state = self.new_state() if use_cache else None
        n = len(prompt_ids)
        logits = self.forward(list(prompt_ids), state, prefill_engram)
        while len(out) < max_new_tokens:
            token = int(logits[-1].argmax())
            out.append(token)
            if token == self.config.eos_token_id or len(out) == max_new_tokens:
                break
            if state is not None:
                logits = self.forward([token], state, decode_engram)
            else:
                mask = torch.tensor([prefill_engram] * n + [decode_engram] * len(out))
                logits = self.forward([*prompt_ids, *out], None, mask)
        return out

    def close(self) -> None:
        """Release the Engram tables (files, pinned memory)."""
        for table in self.tables.values():
            table.close()


def _open_table(
    f: object,
    cfg: TinyEngramConfig,
    layer: int,
    placement: str,
    ssd_dir: str | Path | None,
    device: torch.device | str,
) -> EngramTable:
    index = cfg.engram_layer_ids.index(layer)
    rows, dim = cfg.engram_num_embeddings[index], cfg.engram_head_dim
    declared = placement_named(placement)
    if not declared.loads_rows:
        # NOTE: ssd tables were converted from the checkpoint file by from_pretrained.
        path = table_dir(ssd_dir, layer) if declared.files and ssd_dir is not None else None
        return create_table(
            placement, None, None, num_rows=rows, head_dim=dim, device=device, path=path
        )
    weight_name, scale_name = engram_table_names(layer)
    weight, scale = f.get_tensor(weight_name), f.get_tensor(scale_name)  # type: ignore[attr-defined]
    if weight.shape[0] != rows:
        raise EngramConfigError(
            f"{weight_name} has {weight.shape[0]:,} rows but engram_num_embeddings says {rows:,}"
        )
    return create_table(placement, weight, scale, device=device, head_dim=dim, num_rows=rows)
