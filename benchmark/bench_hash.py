"""Our batched hashing against upstream's compute_engram_hash_ids on the CPU.

Same input for both: T tokens (default 8,192) of random ids hashed with the
DeepSeek-V4.1-Flash layout. Ours is timed end to end (window building from the raw
stream, range checks, hashing); upstream is given ready-made windows, so the
comparison favours upstream. Prints a table and, last, one line of JSON.

    python benchmark/bench_hash.py [--tokens 8192] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable

import torch

from engram import EngramSpec, NgramHasher
from engram.presets import DSV41_FLASH

VOCAB = 129_280


def interleaved_medians(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median seconds of each function, alternating them so machine noise hits all alike."""
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()  # warm-up
    for _ in range(repeats):
        for fn, bucket in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - start)
    return [statistics.median(bucket) for bucket in times]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=8192, help="tokens per batch (default 8192)")
    parser.add_argument("--repeats", type=int, default=20, help="timed repeats per side")
    args = parser.parse_args()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sglang.srt.layers.engram import compute_engram_hash_ids

    spec = EngramSpec.from_hf_config(DSV41_FLASH)
    token_map = torch.randint(0, 99_092, (VOCAB,))
    token_map[:99_092] = torch.randperm(99_092)
    hasher = NgramHasher(spec, token_map)
    tokens = torch.randint(0, VOCAB, (args.tokens,))
    lens = torch.tensor([args.tokens])
    hist = hasher.history_row(None).unsqueeze(0)

    windows = hasher.windows(tokens, lens, hist)
    blocked = windows < 0
    up_args = (
        windows.clamp_min(0),
        blocked,
        hasher.pad_compressed,
        token_map,
        hasher.multipliers,
        hasher.primes,
        hasher.offsets,
    )
    assert torch.equal(hasher.hash_batch(tokens, lens, hist), compute_engram_hash_ids(*up_args))

    ours, upstream = interleaved_medians(
        [lambda: hasher.hash_batch(tokens, lens, hist), lambda: compute_engram_hash_ids(*up_args)],
        args.repeats,
    )
    result = {
        "tokens": args.tokens,
        "threads": torch.get_num_threads(),
        "ours_tokens_per_s": args.tokens / ours,
        "upstream_tokens_per_s": args.tokens / upstream,
        "ratio": upstream / ours,
    }
    print(f"{'side':<10}{'ms/batch':>12}{'tokens/s':>16}")
    print(f"{'ours':<10}{ours * 1e3:>12.3f}{result['ours_tokens_per_s']:>16,.0f}")
    print(f"{'upstream':<10}{upstream * 1e3:>12.3f}{result['upstream_tokens_per_s']:>16,.0f}")
    print(f"ratio ours/upstream (throughput): {result['ratio']:.2f}  (target >= 1.0)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
