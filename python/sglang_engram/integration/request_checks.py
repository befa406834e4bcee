"""Reject requests whose token ids would index past an Engram model's tables.

SGLang 0.5.23 checks ``/generate``'s ``input_ids`` against nothing but the context
length: an id past the vocabulary reaches the embedding (and the Engram token map,
which has one entry per tokenizer id) and kills the scheduler, and every request in
flight with it. This AFTER hook on the tokenizer manager's per-request validation raises
``ValueError``, which SGLang answers with a 400 naming the id and the valid range; the
server goes on serving.
"""

from __future__ import annotations

from typing import Any


def valid_id_bound(vocab_size: int, tokenizer: Any | None) -> int:
    """Token ids in ``[0, bound)`` are safe: inside the embedding and the token map."""
    if tokenizer is None:
        return vocab_size
    return min(vocab_size, len(tokenizer))


def first_bad_id(input_ids: list[int], bound: int) -> tuple[int, int] | None:
    """(position, id) of the first id outside ``[0, bound)``, or ``None``."""
    for position, token_id in enumerate(input_ids):
        if not 0 <= token_id < bound:
            return position, token_id
    return None


def after_validate_one_request(result: Any, manager: Any, obj: Any, input_ids: Any) -> None:
    """AFTER ``TokenizerManager._validate_one_request(obj, input_ids)``."""
    if not input_ids or not getattr(manager.model_config.hf_config, "engram_layer_ids", None):
        return
    bound = valid_id_bound(int(manager.model_config.vocab_size), manager.tokenizer)
    bad = first_bad_id(list(input_ids), bound)
    if bad is not None:
        position, token_id = bad
        raise ValueError(
            f"input_ids[{position}] is {token_id}, outside this model's vocabulary: valid "
            f"token ids are 0 to {bound - 1}"
        )
