"""The Engram layer in plain torch: the layer the tiny model is built of, and the reference
the served Engram layers are checked against.

An Engram layer reads its ``n_cols`` rows per token from an :class:`EngramTable`, and adds
a gated value to the residual ``x [T, hc_mult, hidden]`` at the start of its decoder layer.
Two variants are registered in :data:`ENGRAM_VARIANTS`:

- ``v41`` (DeepSeek-V4.1): ``kv = wkv(concat(rows))`` holds one key per residual stream
  and one shared value; each stream gates the value by a normalised dot product with its
  key. fp32 math, one cast back to ``x``'s dtype.
- ``paper``: DeepSeek's public demo (``engram_demo_v1.py`` in deepseek-ai/Engram): per-stream
  key projections and a value projection, all with biases; per-stream RMSNorms of keys and
  queries; a sign-sqrt sigmoid gate (exactly 1/2 where the dot product is 0); and a causal
  depthwise ShortConv (kernel 4, dilation N, its own RMSNorms) whose SiLU output is added to
  the gated value. The epsilons are the demo's: the gate norms are ``nn.RMSNorm`` without
  an eps, i.e. the fp32 machine epsilon for the demo's fp32 activations, and the ShortConv
  norms use 1e-5 (``config.eps``, the model's ``rms_norm_eps``, is the V4.1 gate's).
  Differences from the demo that remain: the rows are FP8 dequantised to bf16 (the demo
  keeps fp32 embeddings); the math runs in fp32 whatever ``x``'s dtype, with one cast back;
  image tokens keep ``x`` (the demo has none); chunked prefill and decoding carry the conv
  history in :class:`EngramState` (the demo convolves whole sequences; the result is the
  same, see the tests).

With the ``off`` placement every variant is the identity and never touches its table.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import nn

from engram.errors import EngramConfigError
from engram.spec import EngramSpec
from engram.tables import EngramTable

# NOTE: the gate's signed square root floors |d| here (as the DSv4.1 training kernel
# does), so in the V4.1 gate d == 0 still gets a positive gate slightly above 1/2.
GATE_FLOOR = 1e-6


@dataclass(frozen=True)
class EngramLayerConfig:
    """Shapes and variant of one Engram layer."""

    hidden_size: int
    hc_mult: int
    n_cols: int
    head_dim: int
    max_ngram_size: int
    variant: str = "v41"
    eps: float = 1e-6
    image_token_id: int | None = None
    conv_kernel: int = 4

    def __post_init__(self) -> None:
        if self.variant not in ENGRAM_VARIANTS:
            raise EngramConfigError(
                f"unknown engram_variant {self.variant!r}; choose one of "
                f"{', '.join(ENGRAM_VARIANTS)}"
            )
        if self.hc_mult < 1 or self.hidden_size < 1:
            raise EngramConfigError(
                f"hc_mult and hidden_size must be >= 1, got {self.hc_mult} and {self.hidden_size}"
            )

    @classmethod
    def from_spec(
        cls, spec: EngramSpec, variant: str = "v41", image_token_id: int | None = None
    ) -> EngramLayerConfig:
        if spec.hidden_size is None or spec.hc_mult is None:
            raise EngramConfigError("the Engram layer needs hidden_size and hc_mult in the config")
        return cls(
            hidden_size=spec.hidden_size,
            hc_mult=spec.hc_mult,
            n_cols=spec.n_cols,
            head_dim=spec.head_dim,
            max_ngram_size=spec.max_ngram_size,
            variant=variant,
            eps=spec.rms_norm_eps,
            image_token_id=image_token_id,
        )

    @property
    def input_dim(self) -> int:
        """Width of one token's concatenated rows."""
        return self.n_cols * self.head_dim

    @property
    def conv_dilation(self) -> int:
        return self.max_ngram_size

    @property
    def conv_context(self) -> int:
        """Earlier positions the ShortConv reads: (kernel - 1) * dilation."""
        return (self.conv_kernel - 1) * self.conv_dilation


@dataclass
class EngramState:
    """Per-request state carried between chunks (only the ``paper`` variant needs it):
    the last ``conv_context`` normalised values, ``[conv_context, hc_mult, hidden]``."""

    conv: torch.Tensor | None = None


class Engram(nn.Module, ABC):
    """Base of the variants: the ``off`` short-cut, the row lookup and image rows.

    ``dtype`` is the dtype of the variant's parameters (the checkpoint's).
    """

    def __init__(
        self, config: EngramLayerConfig, table: EngramTable, dtype: torch.dtype = torch.bfloat16
    ):
        super().__init__()
        self.config = config
        self.table = table

    @property
    def enabled(self) -> bool:
        return self.table.declaration.holds_table

    def forward(
        self,
        x: torch.Tensor,
        row_ids: torch.Tensor,
        *,
        input_ids: torch.Tensor | None = None,
        state: EngramState | None = None,
    ) -> torch.Tensor:
        """``x`` [T, hc_mult, hidden], ``row_ids`` [T, n_cols] -> the new residual."""
        if not self.enabled:
            return x
        rows = self.table.lookup(row_ids).flatten(-2)  # [T, n_cols * head_dim] bf16
        keep = None
        if input_ids is not None and self.config.image_token_id is not None:
            keep = input_ids.reshape(-1) == self.config.image_token_id
        return self._fuse(x, rows, keep, state)

    @abstractmethod
    def _fuse(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        keep: torch.Tensor | None,
        state: EngramState | None,
    ) -> torch.Tensor:
        """Add the gated value of ``rows`` [T, input_dim] to ``x``; rows where ``keep``
        [T] is true (image tokens) stay unchanged."""


class V41Engram(Engram):
    """DeepSeek-V4.1: ``wkv`` projection and a per-stream sign-sqrt sigmoid gate."""

    def __init__(
        self, config: EngramLayerConfig, table: EngramTable, dtype: torch.dtype = torch.bfloat16
    ):
        super().__init__(config, table)
        hidden, hc = config.hidden_size, config.hc_mult
        self.wkv = nn.Linear(config.input_dim, (hc + 1) * hidden, bias=False, dtype=dtype)
        self.q_weight = nn.Parameter(torch.ones(hc, hidden, dtype=dtype), requires_grad=False)
        self.k_weight = nn.Parameter(torch.ones(hc, hidden, dtype=dtype), requires_grad=False)

    def _fuse(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        keep: torch.Tensor | None,
        state: EngramState | None,
    ) -> torch.Tensor:
        kv = self.wkv(rows.to(self.wkv.weight.dtype))
        return v41_gate(x, kv, self.q_weight, self.k_weight, self.config.eps, keep)


def v41_gate(
    x: torch.Tensor,
    kv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x`` [T, hc, D] plus the gated shared value of ``kv`` [T, (hc + 1) * D].

    Rows where ``keep`` [T] is true (image tokens) come back unchanged.
    """
    hc, dim = x.shape[-2:]
    value = kv[..., hc * dim :].float()
    gate = v41_gate_values(x, kv, q_weight, k_weight, eps)
    out = (x.float() + gate.unsqueeze(-1) * value.unsqueeze(-2)).to(x.dtype)
    if keep is not None:
        out = torch.where(keep[:, None, None], x, out)
    return out


def v41_gate_values(
    x: torch.Tensor, kv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float
) -> torch.Tensor:
    """The fp32 gate [T, hc] of each stream of ``x`` [T, hc, D] (also read by gate scans)."""
    hc, dim = x.shape[-2:]
    keys = kv[..., : hc * dim].float().unflatten(-1, (hc, dim))
    h = x.float()
    # NOTE: each stream is normalised on its own (over D), not jointly over the streams;
    # the product order below is the one the DSv4.1 kernels use, keep it for bit-exactness.
    norm = torch.rsqrt(h.square().mean(-1) + eps) * torch.rsqrt(keys.square().mean(-1) + eps)
    dot = (h * (q_weight.float() * k_weight.float()) * keys).sum(-1) * norm * dim**-0.5
    return torch.sigmoid(torch.copysign(dot.abs().clamp_min(GATE_FLOOR).sqrt(), dot))


class PaperEngram(Engram):
    """DeepSeek's demo: per-stream keys and norms, value + SiLU(ShortConv(value)).

    Image-token rows keep ``x``, but their gated value still enters the conv history.
    """

    # The demo's epsilons: its gate norms are nn.RMSNorm(eps=None), which takes the
    # activations' machine epsilon (fp32 here), and its ShortConv norms use 1e-5.
    GATE_NORM_EPS = torch.finfo(torch.float32).eps
    CONV_NORM_EPS = 1e-5

    def __init__(
        self, config: EngramLayerConfig, table: EngramTable, dtype: torch.dtype = torch.bfloat16
    ):
        super().__init__(config, table)
        hidden, hc, k = config.hidden_size, config.hc_mult, config.conv_kernel

        def param(*shape: int, fill: float = 1.0) -> nn.Parameter:
            return nn.Parameter(torch.full(shape, fill, dtype=dtype), requires_grad=False)

        self.key_proj = param(hc, hidden, config.input_dim)
        self.key_bias = param(hc, hidden, fill=0.0)
        self.value_proj = param(hidden, config.input_dim)
        self.value_bias = param(hidden, fill=0.0)
        self.key_norm = param(hc, hidden)
        self.query_norm = param(hc, hidden)
        self.conv_norm = param(hc, hidden)
        self.conv_weight = param(hc, hidden, k)

    def _fuse(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        keep: torch.Tensor | None,
        state: EngramState | None,
    ) -> torch.Tensor:
        cfg = self.config
        emb = rows.float()
        keys = torch.einsum("ti,hdi->thd", emb, self.key_proj.float()) + self.key_bias.float()
        value = nn.functional.linear(emb, self.value_proj.float(), self.value_bias.float())
        h = x.float()
        q = _rms(h, self.GATE_NORM_EPS) * self.query_norm.float()
        kn = _rms(keys, self.GATE_NORM_EPS) * self.key_norm.float()
        gate = paper_gate((q * kn).sum(-1) * cfg.hidden_size**-0.5)
        gated = gate.unsqueeze(-1) * value.unsqueeze(-2)  # [T, hc, D]
        conv = self._short_conv(_rms(gated, self.CONV_NORM_EPS) * self.conv_norm.float(), state)
        out = (h + gated + nn.functional.silu(conv)).to(x.dtype)
        if keep is not None:
            out = torch.where(keep[:, None, None], x, out)
        return out

    def _short_conv(self, normed: torch.Tensor, state: EngramState | None) -> torch.Tensor:
        """Causal depthwise conv over time: out[t] = sum_j w[j] * in[t - (k-1-j) * dil]."""
        cfg = self.config
        ctx, dil, t = cfg.conv_context, cfg.conv_dilation, normed.shape[0]
        past = state.conv if state is not None and state.conv is not None else None
        if past is None:
            # NOTE: before the sequence start the conv reads zeros (left zero padding).
            past = normed.new_zeros(ctx, *normed.shape[1:])
        seq = torch.cat([past, normed])  # [ctx + T, hc, D]
        w = self.conv_weight.float()
        out = torch.zeros_like(normed)
        for j in range(cfg.conv_kernel):
            out += w[..., j] * seq[j * dil : j * dil + t]
        if state is not None:
            state.conv = seq[seq.shape[0] - ctx :].clone()
        return out


def paper_gate(dot: torch.Tensor) -> torch.Tensor:
    """sigmoid(sign(d) * sqrt(max(|d|, GATE_FLOOR))): exactly 1/2 where ``d`` is 0 (the
    demo multiplies by ``sign``, unlike the V4.1 gate's ``copysign``)."""
    return torch.sigmoid(dot.abs().clamp_min(GATE_FLOOR).sqrt() * dot.sign())


def _rms(t: torch.Tensor, eps: float) -> torch.Tensor:
    return t * torch.rsqrt(t.square().mean(-1, keepdim=True) + eps)


ENGRAM_VARIANTS: dict[str, type[Engram]] = {"v41": V41Engram, "paper": PaperEngram}


def make_engram(
    config: EngramLayerConfig, table: EngramTable, dtype: torch.dtype = torch.bfloat16
) -> Engram:
    """The Engram layer of ``config.variant`` reading rows from ``table``."""
    return ENGRAM_VARIANTS[config.variant](config, table, dtype=dtype)
