"""Workloads as ``python -m sglang.benchmark.serving`` arguments (its own datasets).

``fixed``: the ``random-ids`` dataset sent as token ids (``--tokenize-prompt``): random
ids drawn offline, each input and output length from [ratio * L, L].
``multi-turn``: the ``generated-shared-prefix`` dataset with turns, over the chat API
(the benchmark runs multi-turn sessions on chat backends only). Its prompts are random
token ids too, decoded to text because the chat API takes text. No dataset is
downloaded by either.
"""

from __future__ import annotations

import math

from sglang_engram.compare.spec import SweepSpec

BENCH_MODULE = "sglang.benchmark.serving"


def bench_args(spec: SweepSpec, base_url: str, concurrency: int, output_file: str) -> list[str]:
    """Everything after ``python -m sglang.benchmark.serving`` for one point."""
    common = [
        "--base-url", base_url,
        "--model", spec.model,
        "--tokenizer", spec.tokenizer_path,
        "--max-concurrency", str(concurrency),
        "--warmup-requests", str(spec.warmup_requests(concurrency)),
        "--seed", str(spec.seed),
        "--output-file", output_file,
        "--output-details",
        "--disable-tqdm",
    ]  # fmt: skip
    work = spec.workload
    if work.fixed is not None:
        f = work.fixed
        return [
            "--backend", "sglang",
            "--dataset-name", "random-ids",
            "--tokenize-prompt",
            "--num-prompts", str(spec.num_prompts(concurrency)),
            "--random-input-len", str(f.input_len),
            "--random-output-len", str(f.output_len),
            "--random-range-ratio", str(f.range_ratio),
            *common,
        ]  # fmt: skip
    m = work.multi_turn
    assert m is not None
    # NOTE: the dataset makes groups x sessions_per_prefix sessions and ignores
    # --num-prompts; round the group count up so at least num_prompts sessions run.
    groups = math.ceil(spec.num_prompts(concurrency) / m.sessions_per_prefix)
    return [
        "--backend", "sglang-oai-chat",
        "--dataset-name", "generated-shared-prefix",
        "--gsp-num-groups", str(groups),
        "--gsp-prompts-per-group", str(m.sessions_per_prefix),
        "--gsp-system-prompt-len", str(m.system_prompt_len),
        "--gsp-question-len", str(m.question_len),
        "--gsp-output-len", str(m.output_len),
        "--gsp-num-turns", str(m.turns),
        "--gsp-range-ratio", str(m.range_ratio),
        *common,
    ]  # fmt: skip


def expected_requests(spec: SweepSpec, concurrency: int) -> int:
    """Requests the benchmark should complete for one point (one per turn)."""
    m = spec.workload.multi_turn
    if m is None:
        return spec.num_prompts(concurrency)
    groups = math.ceil(spec.num_prompts(concurrency) / m.sessions_per_prefix)
    return groups * m.sessions_per_prefix * m.turns
