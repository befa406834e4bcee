"""What the served ``qwen4_exp`` tests share: the CPU engine's server arguments, random
prompts, and the teacher-forced check of served tokens against a server's own prefill."""

from __future__ import annotations

import random

from engram_testing.client import post

NEW_TOKENS = 16
EOS = 1
VOCAB = 2000  # the tiny checkpoint's vocab_size
# NOTE: the teacher-forced pass reduces in another order than the decode steps (a chunked
# scan against a recurrence, bf16 activations); a served token whose log-probability is
# within this of the pass's best still agrees (3 bf16 ulps at the logits' scale, 8-16).
TIE = 0.2
# NOTE: SGLang sizes the mamba state pool from free host memory (5 GB here) by default
ARGS = ("--attention-backend", "torch_native", "--max-mamba-cache-size", "64", "--sleep-on-idle")


def random_prompts(rng: random.Random, n: int, lo: int = 6, hi: int = 60) -> list[list[int]]:
    """Random ordinary token ids (past the specials); every other prompt has an EOS inside,
    where the PLE n-gram windows restart."""
    prompts = []
    for i in range(n):
        ids = [rng.randrange(3, VOCAB) for _ in range(rng.randint(lo, hi))]
        if i % 2:
            ids[rng.randrange(1, len(ids) - 1)] = EOS
        prompts.append(ids)
    return prompts


def prefill_logprobs(url: str, ids: list[int], start: int) -> list[tuple[float, float]]:
    """For each token from position ``start`` (>= 1) on: (its log-probability given the
    tokens before it, the best log-probability there), from one prefill of ``ids``."""
    status, out = post(
        url,
        "/generate",
        {
            "input_ids": ids,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": 1},
            "return_logprob": True,
            # NOTE: SGLang gives the first token of the window no log-probability
            "logprob_start_len": start - 1,
            "top_logprobs_num": 1,
        },
    )
    assert status == 200, out
    meta = out["meta_info"]
    tokens, tops = meta["input_token_logprobs"][1:], meta["input_top_logprobs"][1:]
    # NOTE: SGLang 0.5.23 reports the top id (vocab_size - 1) of an input as 0 (it clips
    # image-token hashes with ``x < vocab_size - 1``); its log-probability is the top id's
    assert [t[1] for t in tokens] == [i if i < VOCAB - 1 else 0 for i in ids[start:]]
    return [(tok[0], top[0][0]) for tok, top in zip(tokens, tops, strict=True)]


def teacher_forced_gaps(url: str, prompts: list[list[int]], served: list[list[int]]) -> list[float]:
    """Teacher-forced on the server at ``url``: best minus served log-probability at each
    served token's position, over all the prompts."""
    out = []
    for prompt, tokens in zip(prompts, served, strict=True):
        pairs = prefill_logprobs(url, [*prompt, *tokens], len(prompt))
        out += [best - got for got, best in pairs]
    return out


def assert_agree(name: str, gaps: list[float]) -> None:
    """Served tokens agree with a teacher-forced pass: each within ``TIE`` of the best,
    most of them the best."""
    exact = sum(g <= 1e-6 for g in gaps)
    print(f"{name}: {exact}/{len(gaps)} exact, worst gap {max(gaps):.3f}")
    assert max(gaps) <= TIE, (name, gaps)
    assert exact >= 0.8 * len(gaps), (name, gaps)
