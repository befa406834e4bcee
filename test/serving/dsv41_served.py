"""What the served DeepSeek-V4.1 tests share: the tiny checkpoint's prompts (some past the
128-token sliding window, some past a prefill chunk), servers started side by side, and
the in-process reference run beside them."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engram_testing import dsv41_tiny_weights as tiny
from engram_testing.client import generate_ids
from engram_testing.server import sglang_server

NEW_TOKENS = 32
CHUNK = 256  # a prefill chunk (the page size: DeepSeek-V4's smallest)
START_S = 900
# NOTE: each prompt length range: within the window, past it, past a chunk and the window
LENGTHS = ((6, 40), (129, 220), (CHUNK + 20, CHUNK + 120))


def random_prompts(rng: random.Random, per_range: tuple[int, ...]) -> list[list[int]]:
    """``per_range[i]`` prompts of ``LENGTHS[i]`` tokens each: ordinary BPE ids (the chat
    special tokens come after them)."""
    return [
        [rng.randrange(3, tiny.BPE_VOCAB) for _ in range(rng.randint(lo, hi))]
        for count, (lo, hi) in zip(per_range, LENGTHS, strict=True)
        for _ in range(count)
    ]


def serve_all(url: str, prompts: list[list[int]], new_tokens: int = NEW_TOKENS) -> list[list[int]]:
    """Greedy tokens, one request at a time (every server batches them the same way)."""
    return [generate_ids(url, p, new_tokens) for p in prompts]


@contextlib.contextmanager
def started(
    model: Path,
    plans: dict[str, tuple[str, ...]],
    logs: Path,
    before: dict[str, Callable[[], None]] | None = None,
) -> Iterator[dict[str, str]]:
    """One server per plan, started side by side (``before[name]`` runs first in its
    thread); yields name -> URL, and stops them all."""
    before = before or {}

    def start(stack: contextlib.ExitStack, name: str) -> str:
        if name in before:
            before[name]()
        server = sglang_server(model, *plans[name], log=logs / f"{name}.log", timeout_s=START_S)
        return stack.enter_context(server)

    with contextlib.ExitStack() as stack, ThreadPoolExecutor(len(plans)) as pool:
        futures = {name: pool.submit(start, stack, name) for name in plans}
        yield {name: future.result() for name, future in futures.items()}
