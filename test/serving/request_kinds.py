"""Malformed and degenerate requests, as hypothesis strategies: one :class:`Kind` per shape
a client can send to native ``/generate``, ``/v1/completions`` and
``/v1/chat/completions``, each with what a server must answer (refused: a 4xx; served:
a 200; either). No kind may get a 5xx or end a scheduler (``request_fuzz.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

GENERATE, COMPLETIONS, CHAT = "/generate", "/v1/completions", "/v1/chat/completions"
REFUSED, SERVED, EITHER = "refused", "served", "either"
# NOTE: every served kind asks for a few tokens at most: the suite runs hundreds of
# requests against CPU servers.
MAX_NEW = 4


@dataclass(frozen=True)
class Model:
    """What the kinds need to know of the served model."""

    vocab: int  # valid token ids are [0, vocab)
    context_len: int
    max_prompt: int  # shorter prompts fit every worker's KV pool and context
    # NOTE: every worker refuses a prompt this long. Through PD, one between the two
    # (the prefill worker takes it, a decode worker does not) waits for SGLang's
    # bootstrap timeout, 300 s (sglang_engram.cluster.prompt_limits).
    refused_prompt: int
    pd_router: bool = False  # requests go through sglang-router to a prefill/decode pair
    # NOTE: the chat encoder puts special tokens around every message (SGLang's own for
    # DeepSeek-V4.1), so an empty message still makes a prompt
    chat_marks_roles: bool = False


@dataclass(frozen=True)
class Request:
    kind: str
    expect: str
    path: str
    body: Any  # a JSON value, or str: raw bytes sent as they are
    stream: bool = False


@dataclass(frozen=True)
class Kind:
    name: str
    expect: str | Callable[[Model], str]  # what a server of that model must answer
    path: str
    body: Callable[[Model], st.SearchStrategy[Any]]
    stream: bool = False

    def expect_of(self, m: Model) -> str:
        return self.expect if isinstance(self.expect, str) else self.expect(m)


def single_sample(m: Model) -> str:
    """n > 1: served by one server, refused through PD (SGLang's transfer would hang)."""
    return REFUSED if m.pd_router else SERVED


def router_drops(m: Model) -> str:
    """A field the servers refuse but sglang-router's typed /generate request drops."""
    return EITHER if m.pd_router else REFUSED


def empty_chat(m: Model) -> str:
    """An empty message: an empty prompt (refused) unless the server's encoder marks the
    roles; sglang-router refuses it before any worker sees it."""
    return SERVED if m.chat_marks_roles and not m.pd_router else REFUSED


def router_refuses(m: Model) -> str:
    """Served by a server; sglang-router's /v1/completions takes text prompts only (422)."""
    return REFUSED if m.pd_router else SERVED


def ids(m: Model, lo: int = 1, hi: int = 40, first: int = 0) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(first, m.vocab - 1), min_size=lo, max_size=hi)


def prompt_ids(m: Model) -> st.SearchStrategy[list[int]]:
    """Token ids as an OpenAI prompt.

    NOTE: SGLang 0.5.23 refuses a prompt whose ids are all 0 as empty (a 400)."""
    return ids(m, first=1)


def with_bad(m: Model, bad: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """A prompt with one bad entry at a drawn position."""
    return st.tuples(ids(m), bad, st.integers(0, 40)).map(
        lambda t: t[0][: t[2] % (len(t[0]) + 1)] + [t[1]] + t[0][t[2] % (len(t[0]) + 1) :]
    )


def oov(m: Model) -> st.SearchStrategy[int]:
    return st.integers(m.vocab, 2**62)


def negative() -> st.SearchStrategy[int]:
    return st.integers(-(2**62), -1)


def gen(m: Model, **params: Any) -> st.SearchStrategy[dict]:
    """A ``/generate`` body of a good prompt whose sampling params add ``params``."""
    return st.fixed_dictionaries(
        {
            "input_ids": ids(m),
            "sampling_params": st.fixed_dictionaries(
                {"max_new_tokens": st.integers(0, MAX_NEW), **params}
            ),
        }
    )


def gen_with(m: Model, **fields: Any) -> st.SearchStrategy[dict]:
    """A ``/generate`` body of a good prompt with top-level ``fields``."""
    return st.fixed_dictionaries(
        {"input_ids": ids(m), "sampling_params": st.just({"max_new_tokens": MAX_NEW}), **fields}
    )


def comp(m: Model, prompt: st.SearchStrategy[Any] | None = None, **fields: Any):
    return st.fixed_dictionaries(
        {
            "model": st.just("default"),
            "prompt": prompt if prompt is not None else st.text(min_size=1, max_size=40),
            "max_tokens": st.integers(1, MAX_NEW),
            **fields,
        }
    )


def chat(messages: st.SearchStrategy[Any], **fields: Any) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries(
        {
            "model": st.just("default"),
            "messages": messages,
            "max_tokens": st.just(MAX_NEW),
            **fields,
        }
    )


def user(content: st.SearchStrategy[Any]) -> st.SearchStrategy[list[dict]]:
    return st.fixed_dictionaries({"role": st.just("user"), "content": content}).map(lambda d: [d])


def _prompt_of(length: Callable[[Model], int], new: int):
    def body(m: Model) -> st.SearchStrategy[dict]:
        return st.integers(0, m.vocab - 1).map(
            lambda t: {
                "input_ids": [t] * length(m),
                "sampling_params": {"max_new_tokens": new, "ignore_eos": True},
            }
        )

    return body


def _kinds() -> list[Kind]:
    j = st.just
    return [
        # --- native /generate: prompts
        Kind(
            "ids_out_of_vocab",
            REFUSED,
            GENERATE,
            lambda m: gen_with(m, input_ids=with_bad(m, oov(m))),
        ),
        Kind(
            "ids_negative",
            REFUSED,
            GENERATE,
            lambda m: gen_with(m, input_ids=with_bad(m, negative())),
        ),
        Kind(
            "ids_past_int64",
            REFUSED,
            GENERATE,
            lambda m: gen_with(m, input_ids=with_bad(m, st.integers(2**63, 2**70))),
        ),
        Kind(
            "ids_not_ints",
            REFUSED,
            GENERATE,
            lambda m: gen_with(
                m,
                input_ids=with_bad(
                    m,
                    st.one_of(
                        st.floats(allow_nan=False, allow_infinity=False).filter(
                            lambda f: f != int(f)
                        ),
                        st.text(max_size=3),
                        st.none(),
                        st.booleans(),
                    ),
                ),
            ),
        ),
        Kind(
            "ids_nested_too_deep",
            REFUSED,
            GENERATE,
            lambda m: gen_with(m, input_ids=ids(m).map(lambda x: [[x]])),
        ),
        Kind("ids_empty", REFUSED, GENERATE, lambda m: gen_with(m, input_ids=j([]))),
        Kind(
            "text_empty",
            REFUSED,
            GENERATE,
            lambda m: st.fixed_dictionaries(
                {"text": j(""), "sampling_params": j({"max_new_tokens": MAX_NEW})}
            ),
        ),
        Kind(
            "text_whitespace",
            EITHER,
            GENERATE,
            lambda m: st.fixed_dictionaries(
                {
                    "text": st.text(" \t\n\r", min_size=1, max_size=8),
                    "sampling_params": j({"max_new_tokens": MAX_NEW}),
                }
            ),
        ),
        Kind(
            "text_any_unicode",
            EITHER,
            GENERATE,
            lambda m: st.fixed_dictionaries(
                {"text": st.text(max_size=60), "sampling_params": j({"max_new_tokens": MAX_NEW})}
            ),
        ),
        Kind("one_token", SERVED, GENERATE, lambda m: gen_with(m, input_ids=ids(m, 1, 1))),
        Kind("prompt_at_context_len", REFUSED, GENERATE, _prompt_of(lambda m: m.context_len, 1)),
        Kind(
            "prompt_over_context_len", REFUSED, GENERATE, _prompt_of(lambda m: m.context_len + 1, 1)
        ),
        # NOTE: a server's longest prompt: its KV pool or context, less a few tokens
        Kind(
            "prompt_fills_the_server", SERVED, GENERATE, _prompt_of(lambda m: m.max_prompt - 1, 1)
        ),
        Kind(
            "prompt_past_the_server", REFUSED, GENERATE, _prompt_of(lambda m: m.refused_prompt, 1)
        ),
        Kind(
            "both_text_and_ids",
            EITHER,
            GENERATE,
            lambda m: gen_with(m, text=st.text(min_size=1, max_size=20)),
        ),
        Kind(
            "neither_text_nor_ids",
            REFUSED,
            GENERATE,
            lambda m: st.fixed_dictionaries({"sampling_params": j({"max_new_tokens": MAX_NEW})}),
        ),
        Kind(
            "batch_one_bad_prompt",
            REFUSED,
            GENERATE,
            lambda m: st.tuples(ids(m), with_bad(m, st.one_of(oov(m), negative()))).map(
                lambda t: {"input_ids": list(t), "sampling_params": {"max_new_tokens": MAX_NEW}}
            ),
        ),
        Kind(
            "batch_one_empty_text",
            REFUSED,
            GENERATE,
            lambda m: st.text(min_size=1, max_size=20).map(
                lambda s: {"text": [s, ""], "sampling_params": {"max_new_tokens": MAX_NEW}}
            ),
        ),
        Kind(
            "batch_good",
            SERVED,
            GENERATE,
            lambda m: st.lists(ids(m), min_size=2, max_size=3).map(
                lambda p: {"input_ids": p, "sampling_params": {"max_new_tokens": MAX_NEW}}
            ),
        ),
        Kind(
            "body_not_json",
            REFUSED,
            GENERATE,
            lambda m: st.sampled_from(["", "{", "input_ids=1", "{'a': 1}", "[1,"]),
        ),
        Kind(
            "body_not_an_object",
            REFUSED,
            GENERATE,
            lambda m: st.one_of(
                st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=5), st.none()
            ),
        ),
        # --- native /generate: sampling parameters
        Kind("max_new_tokens_zero", SERVED, GENERATE, lambda m: gen(m, max_new_tokens=j(0))),
        Kind(
            "max_new_tokens_negative",
            REFUSED,
            GENERATE,
            lambda m: gen(m, max_new_tokens=negative()),
        ),
        Kind(
            "max_new_tokens_past_context",
            REFUSED,
            GENERATE,
            lambda m: gen(m, max_new_tokens=st.integers(m.context_len, 2**62)),
        ),
        Kind(
            "max_new_tokens_not_int",
            REFUSED,
            GENERATE,
            lambda m: gen(
                m,
                max_new_tokens=st.one_of(st.text(max_size=3), st.lists(st.integers(), max_size=2)),
            ),
        ),
        Kind(
            "temperature_negative",
            REFUSED,
            GENERATE,
            lambda m: gen(m, temperature=st.floats(-1e6, -1e-3)),
        ),
        Kind(
            "top_p_out_of_range",
            REFUSED,
            GENERATE,
            lambda m: gen(m, top_p=st.one_of(st.floats(-10, 0), st.floats(1.001, 10))),
        ),
        Kind(
            "top_k_invalid",
            REFUSED,
            GENERATE,
            lambda m: gen(m, top_k=st.one_of(j(0), st.integers(-(2**31), -2))),
        ),
        Kind(
            "top_k_past_vocab",
            EITHER,
            GENERATE,
            lambda m: gen(m, top_k=st.integers(m.vocab, 2**31)),
        ),
        Kind(
            "min_p_out_of_range",
            REFUSED,
            GENERATE,
            lambda m: gen(m, min_p=st.one_of(st.floats(-10, -0.001), st.floats(1.001, 10))),
        ),
        Kind(
            "penalty_out_of_range",
            REFUSED,
            GENERATE,
            lambda m: st.sampled_from(["frequency_penalty", "presence_penalty"]).flatmap(
                lambda k: gen(m, **{k: st.floats(2.01, 1e6)})
            ),
        ),
        Kind(
            "repetition_penalty_invalid",
            REFUSED,
            GENERATE,
            lambda m: gen(m, repetition_penalty=st.floats(-10, 0)),
        ),
        Kind(
            "min_new_tokens_past_max",
            REFUSED,
            GENERATE,
            lambda m: gen(m, max_new_tokens=j(2), min_new_tokens=st.integers(3, 100)),
        ),
        Kind(
            "stop_longer_than_output",
            SERVED,
            GENERATE,
            lambda m: gen(
                m, stop=st.lists(st.text(min_size=50, max_size=300), min_size=1, max_size=3)
            ),
        ),
        Kind(
            "stop_token_ids_out_of_vocab",
            REFUSED,
            GENERATE,
            lambda m: gen(
                m, stop_token_ids=st.lists(st.one_of(oov(m), negative()), min_size=1, max_size=3)
            ),
        ),
        Kind(
            "stop_token_ids_valid", SERVED, GENERATE, lambda m: gen(m, stop_token_ids=ids(m, 1, 5))
        ),
        Kind(
            "logit_bias_out_of_vocab",
            router_drops,
            GENERATE,
            lambda m: gen(
                m,
                logit_bias=st.dictionaries(
                    st.one_of(oov(m), negative()).map(str),
                    st.floats(-100, 100),
                    min_size=1,
                    max_size=3,
                ),
            ),
        ),
        Kind(
            "logit_bias_valid",
            SERVED,
            GENERATE,
            lambda m: gen(
                m,
                logit_bias=st.dictionaries(
                    st.integers(0, m.vocab - 1).map(str), st.floats(-100, 100), max_size=3
                ),
            ),
        ),
        Kind(
            "unknown_sampling_param",
            router_drops,
            GENERATE,
            lambda m: gen(m, no_such_param=st.integers()),
        ),
        Kind(
            "regex_invalid",
            REFUSED,
            GENERATE,
            lambda m: gen(m, regex=st.sampled_from(["(", "[a-", "a{2,1}", "*"])),
        ),
        Kind(
            "json_schema_invalid",
            REFUSED,
            GENERATE,
            lambda m: gen(m, json_schema=st.sampled_from(["{", "{not json", "[1,"])),
        ),
        Kind("n_several", single_sample, GENERATE, lambda m: gen(m, n=st.integers(2, 3))),
        Kind("n_not_positive", REFUSED, GENERATE, lambda m: gen(m, n=st.integers(-(2**40), 0))),
        Kind(
            "sampling_params_not_a_dict",
            REFUSED,
            GENERATE,
            lambda m: gen_with(
                m,
                sampling_params=st.one_of(
                    st.lists(st.integers(), min_size=1, max_size=2),
                    st.integers(),
                    st.text(min_size=1, max_size=3),
                ),
            ),
        ),
        # --- native /generate: log-probabilities and other fields
        Kind(
            "token_ids_logprob_out_of_vocab",
            REFUSED,
            GENERATE,
            lambda m: gen_with(
                m,
                return_logprob=j(True),
                token_ids_logprob=st.lists(st.one_of(oov(m), negative()), min_size=1, max_size=3),
            ),
        ),
        Kind(
            "top_logprobs_past_vocab",
            REFUSED,
            GENERATE,
            lambda m: gen_with(
                m, return_logprob=j(True), top_logprobs_num=st.integers(m.vocab + 1, 2**40)
            ),
        ),
        Kind(
            "top_logprobs_valid",
            SERVED,
            GENERATE,
            lambda m: gen_with(m, return_logprob=j(True), top_logprobs_num=st.integers(0, 5)),
        ),
        Kind(
            "logprob_start_negative",
            REFUSED,
            GENERATE,
            lambda m: gen_with(
                m, return_logprob=j(True), logprob_start_len=st.integers(-(2**40), -2)
            ),
        ),
        Kind(
            "logprob_start_past_prompt",
            REFUSED,
            GENERATE,
            lambda m: gen_with(
                m,
                input_ids=ids(m, 1, 10),
                return_logprob=j(True),
                logprob_start_len=st.integers(10, 2**40),
            ),
        ),
        Kind(
            "logprob_start_in_prompt",
            SERVED,
            GENERATE,
            lambda m: gen_with(
                m,
                input_ids=ids(m, 5, 10),
                return_logprob=j(True),
                logprob_start_len=st.integers(0, 4),
            ),
        ),
        Kind(
            "hidden_states_not_enabled",
            REFUSED,
            GENERATE,
            lambda m: gen_with(m, return_hidden_states=j(True)),
        ),
        Kind(
            "input_embeds",
            REFUSED,
            GENERATE,
            lambda m: st.lists(
                st.lists(st.floats(-1, 1), min_size=2, max_size=2), min_size=1, max_size=3
            ).map(lambda e: {"input_embeds": e, "sampling_params": {"max_new_tokens": MAX_NEW}}),
        ),
        Kind(
            "lora_not_enabled",
            REFUSED,
            GENERATE,
            lambda m: gen_with(m, lora_path=st.text(min_size=1, max_size=8)),
        ),
        Kind(
            "stream_bad_ids",
            REFUSED,
            GENERATE,
            lambda m: gen_with(m, input_ids=with_bad(m, oov(m)), stream=j(True)),
            stream=True,
        ),
        Kind("stream_good", SERVED, GENERATE, lambda m: gen_with(m, stream=j(True)), stream=True),
        # --- /v1/completions
        Kind(
            "completion_empty_prompt",
            REFUSED,
            COMPLETIONS,
            lambda m: comp(m, st.sampled_from(["", []])),
        ),
        Kind(
            "completion_ids_out_of_vocab",
            REFUSED,
            COMPLETIONS,
            lambda m: comp(m, with_bad(m, st.one_of(oov(m), negative()))),
        ),
        Kind(
            "completion_batch_one_bad",
            REFUSED,
            COMPLETIONS,
            lambda m: comp(m, st.tuples(ids(m), with_bad(m, oov(m))).map(list)),
        ),
        Kind("completion_ids", router_refuses, COMPLETIONS, lambda m: comp(m, prompt_ids(m))),
        Kind("completion_text", SERVED, COMPLETIONS, lambda m: comp(m)),
        Kind(
            "completion_n_several",
            single_sample,
            COMPLETIONS,
            lambda m: comp(m, prompt_ids(m), n=st.integers(2, 3)),
        ),
        Kind(
            "completion_n_not_positive",
            REFUSED,
            COMPLETIONS,
            lambda m: comp(m, prompt_ids(m), n=st.integers(-5, 0)),
        ),
        Kind(
            "completion_max_tokens_not_positive",
            REFUSED,
            COMPLETIONS,
            lambda m: comp(m, prompt_ids(m), max_tokens=st.integers(-(2**40), 0)),
        ),
        Kind(
            "completion_logprobs_past_vocab",
            REFUSED,
            COMPLETIONS,
            lambda m: comp(m, prompt_ids(m), logprobs=st.integers(m.vocab + 1, 2**40)),
        ),
        Kind(
            "completion_echo_logprobs",
            router_refuses,
            COMPLETIONS,
            lambda m: comp(m, prompt_ids(m), echo=j(True), logprobs=st.integers(0, 3)),
        ),
        Kind(
            "completion_logit_bias_out_of_vocab",
            REFUSED,
            COMPLETIONS,
            lambda m: comp(
                m,
                prompt_ids(m),
                logit_bias=st.dictionaries(
                    oov(m).map(str), st.floats(-100, 100), min_size=1, max_size=2
                ),
            ),
        ),
        Kind(
            "completion_stream_bad",
            REFUSED,
            COMPLETIONS,
            lambda m: comp(m, with_bad(m, oov(m)), stream=j(True)),
            stream=True,
        ),
        Kind(
            "completion_stream",
            router_refuses,
            COMPLETIONS,
            lambda m: comp(m, prompt_ids(m), stream=j(True)),
            stream=True,
        ),
        # --- /v1/chat/completions
        Kind("chat_no_messages", REFUSED, CHAT, lambda m: chat(j([]))),
        Kind(
            "chat_bad_role",
            REFUSED,
            CHAT,
            lambda m: chat(
                st.text(min_size=1, max_size=8)
                .filter(
                    lambda r: (
                        r not in ("user", "system", "assistant", "tool", "developer", "function")
                    )
                )
                .map(lambda r: [{"role": r, "content": "hi"}])
            ),
        ),
        Kind(
            "chat_content_not_text",
            REFUSED,
            CHAT,
            lambda m: chat(
                user(
                    st.one_of(
                        st.none(), st.integers(), st.lists(st.integers(), min_size=1, max_size=2)
                    )
                )
            ),
        ),
        # NOTE: served where the model has a chat template, refused (400) where not
        Kind("chat_message", EITHER, CHAT, lambda m: chat(user(st.text(min_size=1, max_size=40)))),
        # NOTE: an empty prompt where a template renders it as given, no template otherwise
        Kind("chat_empty_content", empty_chat, CHAT, lambda m: chat(user(j("")))),
        Kind(
            "chat_bad_response_format",
            REFUSED,
            CHAT,
            lambda m: chat(user(j("hi")), response_format=j({"type": "json_schema"})),
        ),
        # NOTE: /v1/chat/completions serves max_tokens 0 (/v1/completions refuses it)
        Kind("chat_max_tokens_zero", EITHER, CHAT, lambda m: chat(user(j("hi")), max_tokens=j(0))),
        Kind(
            "chat_max_tokens_negative",
            REFUSED,
            CHAT,
            lambda m: chat(user(j("hi")), max_tokens=st.integers(-(2**40), -1)),
        ),
    ]


KINDS: tuple[Kind, ...] = tuple(_kinds())
