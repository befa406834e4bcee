"""The ablation regimes: where the Engram layers are on, by phase.

A PD deployment computes the prompt's positions on the prefill side and every new token
on the decode side; each regime says whether the Engram layers add their value at the
prompt's positions (``prefill``) and at the continuation's (``decode``). ``prefill_only``
is a decode worker started with ``--engram-offload off``: it attends to KV the prefill
side made with Engram.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Regime:
    prefill: bool
    decode: bool

    def mask(self, prompt_len: int, continuation_len: int) -> torch.Tensor:
        """bool [prompt_len + continuation_len]: Engram on at each position."""
        return torch.tensor([self.prefill] * prompt_len + [self.decode] * continuation_len)


REGIMES: dict[str, Regime] = {
    "both": Regime(prefill=True, decode=True),
    "prefill_only": Regime(prefill=True, decode=False),
    "decode_only": Regime(prefill=False, decode=True),
    "none": Regime(prefill=False, decode=False),
}
