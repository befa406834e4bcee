"""One Engram layer of the tiny model, on SGLang layers and a core-library table.

Runs at the start of its decoder layer on the residual ``x [T, hidden]`` (hc_mult 1):
the layer's rows are looked up by hash id, projected by ``wkv`` into one key per
residual stream plus a shared value, and added through the V4.1 gate (SGLang's
``engram_gate``, fused on CUDA).
"""

from __future__ import annotations

import torch
from sglang.srt.layers.engram import engram_gate
from sglang.srt.layers.linear import ReplicatedLinear
from sglang.srt.utils import add_prefix
from torch import nn

from engram.spec import EngramSpec
from engram.tables import EngramTable
from sglang_engram.forward import lookup_failures
from sglang_engram.models.engram_qwen3.family import TinyEngram
from sglang_engram.protocol.runtime import EngramRuntime
from sglang_engram.tables.opening import open_layer_table

# NOTE: the gate's |d| floor before the square root (reference §1.7).
GATE_FLOOR = 1e-6


class EngramBlock(nn.Module):
    def __init__(
        self,
        spec: EngramSpec,
        layer_id: int,
        hidden_size: int,
        hc_mult: int,
        runtime: EngramRuntime,
        prefix: str = "",
    ):
        super().__init__()
        self.layer_id = layer_id
        self.hash_index = spec.layer_ids.index(layer_id)
        self.num_rows = spec.num_embeddings[self.hash_index]
        self.head_dim = spec.head_dim
        self.eps = spec.rms_norm_eps
        self.hc_mult = hc_mult
        self.runtime = runtime
        # NOTE: the placement it was built in (one per process when serving)
        self.config = runtime.serving_config()
        self.wkv = ReplicatedLinear(
            spec.n_cols * spec.head_dim,
            (hc_mult + 1) * hidden_size,
            bias=False,
            prefix=add_prefix("wkv", prefix),
        )
        self.q_weight = nn.Parameter(torch.empty(hc_mult, hidden_size), requires_grad=False)
        self.k_weight = nn.Parameter(torch.empty(hc_mult, hidden_size), requires_grad=False)
        self.table: EngramTable | None = None
        self._staged: dict[str, torch.Tensor] = {}

    # ---- loading -------------------------------------------------------------------

    def open_ssd(self) -> None:
        """ssd: convert the table from the checkpoint files (first start) or reopen it."""
        self.table = self._open()

    def load_table_tensor(self, kind: str, tensor: torch.Tensor) -> None:
        """hbm/dram: take ``embed.weight`` or ``embed.scale``; build once both arrived."""
        self._staged[kind] = tensor
        if len(self._staged) < 2:
            return
        self.table = self._open(self._staged.pop("weight"), self._staged.pop("scale"))

    def _open(
        self, weight: torch.Tensor | None = None, scale: torch.Tensor | None = None
    ) -> EngramTable:
        return open_layer_table(
            self.runtime,
            self.config,
            TinyEngram(),
            self.layer_id,
            rows=(0, self.num_rows),
            head_dim=self.head_dim,
            device=self.wkv.weight.device,
            weight=weight,
            scale=scale,
        )

    # ---- forward ---------------------------------------------------------------------

    def lookup(self, hash_ids: torch.Tensor) -> torch.Tensor:
        """bf16 rows ``[T, n_cols, head_dim]`` of this layer's hash ids ``[T, n_cols]``."""
        assert self.table is not None, f"Engram layer {self.layer_id}: table never loaded"
        return lookup_failures.lookup(self.runtime.failures, self.table, hash_ids)

    def forward(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 0:
            return x
        kv, _ = self.wkv(rows.flatten(1).to(x.dtype))
        streams = x.view(x.shape[0], self.hc_mult, -1)
        out = engram_gate(streams, kv, self.q_weight, self.k_weight, self.eps, GATE_FLOOR)
        return out.view_as(x)
