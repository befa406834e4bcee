"""The one request guard: what each family declares, and what the guard refuses (the real
servers' 400s, and that they serve on, are tested by the fuzz suite in test/serving/)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from sglang_engram.args.startup_checks import EngramStartupError, check_startup
from sglang_engram.integration.request_checks import RequestGuard, first_bad_id
from sglang_engram.protocol.family import ModelFamily
from sglang_engram.protocol.registry import families
from sglang_engram.protocol.request_limits import RequestLimits
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig

from engram.errors import EngramConfigError
from test.plugin.test_families import _configs
from test.plugin.tiny import write_model_dir


def _guard(bound: int) -> RequestGuard:
    return RequestGuard(RequestLimits(bound), bound)


def _request(**fields) -> SimpleNamespace:
    fields.setdefault("sampling_params", {})
    return SimpleNamespace(**fields)


def test_every_family_declares_its_limits_from_its_config() -> None:
    configs = _configs()
    for family in families():
        config = configs[family.name]
        vocab = config.get("text_config", config)["vocab_size"]
        assert family.request_limits(config).vocab_size == vocab
    # NOTE: the Engram token map has one entry per tokenizer id; PLE hashes raw ids
    tiny = next(f for f in families() if f.name == "engram_qwen3").request_limits(
        configs["engram_qwen3"]
    )
    assert tiny.id_bound(tiny.vocab_size - 9) == tiny.vocab_size - 9
    qwen4 = next(f for f in families() if f.name == "qwen4_exp").request_limits(
        configs["qwen4_exp"]
    )
    assert qwen4.id_bound(qwen4.vocab_size - 9) == qwen4.vocab_size


def test_a_family_without_the_declaration_cannot_be_made() -> None:
    class Undeclared(ModelFamily):
        name = title = tables = "x"

        def matches(self, hf_config):
            return False

        def table_layers(self, hf_config):
            return ()

    with pytest.raises(TypeError, match="request_limits"):
        Undeclared()


@pytest.mark.parametrize("family", ["engram_qwen3", "qwen4_exp", "longcat_flash"])
def test_a_config_that_cannot_state_its_limits_fails_at_start_up(tmp_path, family) -> None:
    config = _configs()[family]
    text = config.get("text_config", config)
    text["vocab_size"] = random.choice([None, 0, -5, "2000"])
    model = write_model_dir(tmp_path / "m", config)
    with pytest.raises(EngramStartupError, match="vocab_size"):
        check_startup(get_runtime(), EngramServerConfig(offload="off"), model_path=str(model))


def test_limits_refuse_an_empty_vocabulary() -> None:
    with pytest.raises(EngramConfigError):
        RequestLimits(0)


@pytest.mark.parametrize("bad", ["negative", "at_bound", "far", "float", "bool"])
def test_the_first_id_outside_the_range_is_named(bad):
    bound = random.randrange(100, 10_000)
    ids = [random.randrange(bound) for _ in range(random.randint(2, 50))]
    assert first_bad_id(ids, bound) is None
    value = {
        "negative": -random.randrange(1, 9),
        "at_bound": bound,
        "far": bound * 1000,
        "float": 1.5,
        "bool": True,
    }[bad]
    at = random.randrange(len(ids))
    ids[at] = value
    ids.append(-1)  # a later bad id is not the first
    assert first_bad_id(ids, bound) == (at, value)


def test_the_guard_names_the_field_and_the_value() -> None:
    bound = random.randrange(100, 10_000)
    guard = _guard(bound)
    good = [random.randrange(bound) for _ in range(10)]
    guard.check(_request(top_logprobs_num=3, logprob_start_len=-1), good)
    cases = {
        "the prompt has 0 tokens": (_request(), []),
        f"input_ids[3] is {bound}": (_request(), good[:3] + [bound]),
        f"stop_token_ids[0] is {-bound}": (
            _request(sampling_params={"stop_token_ids": [-bound]}),
            good,
        ),
        f"logit_bias key '{bound + 1}'": (
            _request(sampling_params={"logit_bias": {str(bound + 1): 1.0}}),
            good,
        ),
        "logit_bias key 'x'": (_request(sampling_params={"logit_bias": {"x": 1.0}}), good),
        "n is 0": (_request(sampling_params={"n": 0}), good),
        f"top_logprobs_num is {bound + 1}": (_request(top_logprobs_num=bound + 1), good),
        "logprob_start_len is -2": (_request(logprob_start_len=-2), good),
        "logprob_start_len is 10": (_request(logprob_start_len=10), good),
        "input_embeds cannot be served": (_request(input_embeds=[[0.5, -0.25]]), None),
    }
    for message, (obj, ids) in cases.items():
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            guard.check(obj, ids)
    assert f"0 to {bound - 1}" in _error(guard, _request(), [bound])


def _error(guard: RequestGuard, obj, ids) -> str:
    with pytest.raises(ValueError) as caught:
        guard.check(obj, ids)
    return str(caught.value)


def test_a_disaggregated_server_refuses_several_completions_per_request() -> None:
    bound = random.randrange(100, 10_000)
    good = [random.randrange(bound) for _ in range(10)]
    n = random.randrange(2, 9)
    several = _request(sampling_params={"n": n})
    _guard(bound).check(several, good)
    pd = RequestGuard(RequestLimits(bound), bound, disaggregated=True)
    assert f"n is {n}: a prefill/decode disaggregated deployment" in _error(pd, several, good)
    pd.check(_request(sampling_params={"n": 1}), good)


def test_a_prompt_past_the_servers_kv_pool_is_refused() -> None:
    bound = random.randrange(100, 10_000)
    longest = random.randrange(8, 64)
    guard = RequestGuard(RequestLimits(bound), bound, max_prompt_tokens=longest)
    prompt = [random.randrange(bound) for _ in range(longest)]
    guard.check(_request(), prompt[:-1])
    message = _error(guard, _request(), prompt)
    assert f"the prompt has {longest} tokens; this server takes at most {longest - 1}" in message
