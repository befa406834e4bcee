"""What the SSD read-ahead needs of a model family's hash: the global row ids a request's
tokens will look up, from token ids alone (:class:`RowHasher`).

Each family builds one from the constants its loaded model holds
(``ModelFamily.row_hasher``, asked once the model is loaded): DeepSeek-V4.1 and the tiny
model an Engram hash with their token map, Qwen3.8-Flash-Next its PLE hash with the
checkpoint's multipliers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch


class RowHasher(Protocol):
    # the layer id of each hashed table, in the order of the rows' layer dimension
    layer_ids: tuple[int, ...]
    # how many tokens a row id depends on: the token and its predecessors
    window: int

    def prompt_rows(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Row ids ``[T, layers, columns]`` of a whole prompt, hashed from its start."""
        ...

    def step_rows(self, tails: Sequence[Sequence[int]]) -> torch.Tensor:
        """Row ids ``[B, layers, columns]`` of each sequence's newest token, given the
        last ``window`` tokens of each (fewer at the start of a request)."""
        ...
