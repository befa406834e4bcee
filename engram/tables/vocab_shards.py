"""One TP rank's rows of a table sharded as upstream's ``VocabParallelEmbedding`` shards
its vocabulary (Qwen3.8-Flash-Next's PLE tables are such embeddings).

Upstream (``srt/layers/vocab_parallel_embedding.py``) pads the row count to a multiple
of 64, or of 64 x TP size when TP size does not divide that, gives every rank an equal
slice of the padded rows and clips each slice to the real rows: shards are uneven, and a
rank whose slice starts past the last row owns none (128 rows at TP 3: 64, 64 and 0).
Every rank looks up every id, returns zeros for the ids it does not own, and an
all-reduce sums the ranks' rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram.errors import EngramTableError

VOCAB_PADDING = 64  # upstream's DEFAULT_VOCAB_PADDING_SIZE


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class VocabShard:
    """The rows ``[start, stop)`` TP rank ``tp_rank`` of ``tp_size`` owns of a
    ``num_rows``-row table."""

    num_rows: int
    tp_rank: int
    tp_size: int

    def __post_init__(self) -> None:
        if self.num_rows < 1 or self.tp_size < 1 or not 0 <= self.tp_rank < self.tp_size:
            raise EngramTableError(
                f"no TP shard {self.tp_rank} of {self.tp_size} of a {self.num_rows}-row table"
            )

    @property
    def padded_rows(self) -> int:
        padding = VOCAB_PADDING
        if _round_up(self.num_rows, padding) % self.tp_size:
            padding *= self.tp_size
        return _round_up(self.num_rows, padding)

    @property
    def start(self) -> int:
        return min(self.tp_rank * self.padded_rows // self.tp_size, self.num_rows)

    @property
    def stop(self) -> int:
        return min((self.tp_rank + 1) * self.padded_rows // self.tp_size, self.num_rows)

    @property
    def rows(self) -> int:
        """Rows this rank owns (0 for a rank past the end)."""
        return self.stop - self.start
