"""The one request guard: every request of every model family is checked here against
what the family declares (:class:`~sglang_engram.protocol.request_limits.RequestLimits`)
before it is scheduled.

SGLang 0.5.23 checks a prompt against the context length only: an empty prompt, or a
token id outside the vocabulary, reaches the model and kills the scheduler with every
request in flight (or, where the embedding is padded, is served from a padding row).
This AFTER hook on the tokenizer manager's per-request validation, which every entry
point passes (native ``/generate`` text, ``input_ids`` and batches, ``/v1/completions``,
``/v1/chat/completions``), raises ``ValueError``: SGLang answers it with a 400 naming the
field and the value, and the server goes on serving.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sglang_engram.protocol.model_facts import ModelFacts
from sglang_engram.protocol.request_limits import RequestLimits
from sglang_engram.protocol.runtime import EngramRuntime


def first_bad_id(input_ids: Iterable[Any], bound: int) -> tuple[int, Any] | None:
    """(position, value) of the first entry that is not an int in ``[0, bound)``."""
    for position, token_id in enumerate(input_ids):
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            return position, token_id
        if not 0 <= token_id < bound:
            return position, token_id
    return None


@dataclass(frozen=True)
class RequestGuard:
    """A served model's limits, with its tokenizer's size folded in, and whether the
    server is one side of a prefill/decode pair."""

    limits: RequestLimits
    id_bound: int
    # NOTE: SGLang 0.5.23's PD transfer carries one KV cache per request: with n > 1 the
    # decode worker waits for its samples' caches forever (the client hangs, no error).
    disaggregated: bool = False
    # NOTE: prompts of this many tokens or more do not fit the server's KV pool (or its
    # context). SGLang's scheduler refuses them, except a PD decode worker's, which
    # waits forever for room; refused here, before scheduling, by every server alike.
    max_prompt_tokens: int | None = None

    def _range(self) -> str:
        return f"valid token ids are 0 to {self.id_bound - 1}"

    def _check_ids(self, field: str, ids: Iterable[Any]) -> None:
        bad = first_bad_id(ids, self.id_bound)
        if bad is not None:
            position, value = bad
            raise ValueError(
                f"{field}[{position}] is {value!r}, outside this model's vocabulary: "
                f"{self._range()}"
            )

    def check(self, obj: Any, input_ids: list[int] | None) -> None:
        """Raise ``ValueError`` naming the first field of ``obj`` (one request, its prompt
        tokenized into ``input_ids``) that the model cannot serve."""
        # NOTE: every family's tables are indexed by hashes of token ids. (Through PD the
        # prefill worker refused embeddings for its radix cache while the decode worker,
        # which has none, took them and waited forever for a KV cache.)
        if getattr(obj, "input_embeds", None) is not None:
            raise ValueError(
                "input_embeds cannot be served: this model's n-gram tables are looked up "
                "by token ids; send text or input_ids"
            )
        if input_ids is not None:
            if len(input_ids) < self.limits.min_prompt_tokens:
                raise ValueError(
                    f"the prompt has {len(input_ids)} tokens; this model needs at least "
                    f"{self.limits.min_prompt_tokens} (an empty text or input_ids is refused)"
                )
            if self.max_prompt_tokens is not None and len(input_ids) >= self.max_prompt_tokens:
                raise ValueError(
                    f"the prompt has {len(input_ids)} tokens; this server takes at most "
                    f"{self.max_prompt_tokens - 1} (its KV cache pool or context length)"
                )
            self._check_ids("input_ids", input_ids)
        self._check_logprobs(obj, input_ids)
        params = getattr(obj, "sampling_params", None) or {}
        if isinstance(params, dict):
            self._check_sampling(params)

    def _check_logprobs(self, obj: Any, input_ids: list[int] | None) -> None:
        # NOTE: both reach the scheduler unchecked: a top-k past the vocabulary and a
        # negative start other than -1 ("output only") each end it.
        top = getattr(obj, "top_logprobs_num", None)
        if isinstance(top, int) and top > self.id_bound:
            raise ValueError(
                f"top_logprobs_num is {top}, more than this model's {self.id_bound} token ids"
            )
        start = getattr(obj, "logprob_start_len", None)
        if isinstance(start, int) and start != -1:
            length = len(input_ids) if input_ids is not None else None
            if start < 0 or (length is not None and start >= length):
                allowed = f"0 to {length - 1}" if length else "0 or more"
                raise ValueError(
                    f"logprob_start_len is {start}: use -1 (output tokens only) or a prompt "
                    f"position, {allowed}"
                )

    def _check_sampling(self, params: dict[str, Any]) -> None:
        n = params.get("n")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"n is {n!r}: ask for 1 or more completions")
        if self.disaggregated and isinstance(n, int) and n > 1:
            raise ValueError(
                f"n is {n}: a prefill/decode disaggregated deployment serves one completion "
                "per request; send n requests instead"
            )
        stop_ids = params.get("stop_token_ids")
        if stop_ids is not None:
            if not isinstance(stop_ids, list | tuple | set):
                raise ValueError(f"stop_token_ids must be a list of token ids, not {stop_ids!r}")
            self._check_ids("stop_token_ids", stop_ids)
        bias = params.get("logit_bias")
        if bias is not None:
            if not isinstance(bias, dict):
                raise ValueError(f"logit_bias must map token ids to biases, not {bias!r}")
            for key in bias:
                try:
                    token_id = int(key)
                except (TypeError, ValueError):
                    raise ValueError(f"logit_bias key {key!r} is not a token id") from None
                if not 0 <= token_id < self.id_bound:
                    raise ValueError(
                        f"logit_bias key {key!r} is outside this model's vocabulary: "
                        f"{self._range()}"
                    )


def guard_for(
    facts: ModelFacts,
    vocab_size: int,
    tokenizer_size: int | None,
    disaggregated: bool,
    max_prompt_tokens: int | None,
) -> RequestGuard | None:
    """The guard of the served checkpoint (``None``: not an n-gram-table model, or no
    local ``config.json`` to know its family from)."""
    if facts.family is None or facts.hf_config is None:
        return None
    limits = facts.family.request_limits(facts.hf_config)
    bound = min(limits.id_bound(tokenizer_size), vocab_size)
    return RequestGuard(limits, bound, disaggregated, max_prompt_tokens)


def after_validate_one_request(runtime: EngramRuntime) -> Callable[..., None]:
    """The AFTER hook on ``TokenizerManager._validate_one_request(obj, input_ids)``:
    the served checkpoint's guard (built on the first request) checks each request."""
    guards: dict[tuple[Any, ...], RequestGuard | None] = {}

    def after(result: Any, manager: Any, obj: Any, input_ids: Any) -> None:
        tokenizer = manager.tokenizer
        args = manager.server_args
        # NOTE: with --allow-auto-truncate SGLang cuts a long prompt instead
        longest = None if args.allow_auto_truncate else getattr(manager, "max_req_input_len", None)
        key = (
            args.model_path,
            int(manager.model_config.vocab_size),
            len(tokenizer) if tokenizer is not None else None,
            getattr(args, "disaggregation_mode", "null") != "null",
            longest,
        )
        if key not in guards:
            guards[key] = guard_for(runtime.model_facts(key[0]), *key[1:])
        if guards[key] is not None:
            guards[key].check(obj, input_ids)

    return after
