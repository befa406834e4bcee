"""``ablate --url``: the same samples completed greedily by a running server.

The server is whatever the user deploys (one SGLang server with Engram on or off, or a PD
deployment through the sglang-router); it is reached through SGLang's native
``/generate`` with the prompt as token ids, which one server and the router in PD mode
both answer (the router's OpenAI routes take text prompts only), so both sides see
exactly the same prompt tokens and the served token ids are compared with the
continuation's.
Its score is the local regime it decodes as: one SGLang server with Engram
(``--engram-offload hbm|dram|ssd``) is ``both``, one started with ``off`` is ``none``,
and a PD router whose decode workers run ``off`` is ``prefill_only`` (up to the ties a
server's bf16 kernels break the other way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import requests

from engram.errors import EngramInputError
from engram.eval.samples import Sample
from engram.progress import progress_bar


@dataclass(frozen=True)
class RemoteScore:
    url: str
    exact_match: float
    samples: int
    k: int

    def to_json(self) -> dict[str, object]:
        return {
            "url": self.url,
            "exact_match": self.exact_match,
            "samples": self.samples,
            "k": self.k,
        }

    def table(self) -> str:
        return (
            f"{'server':<40}{f'exact@{self.k}':>12}\n{self.url:<40}{self.exact_match:>12.3f}\n"
            f"{self.samples} samples"
        )


def check_reachable(url: str, timeout: float) -> None:
    """One GET of ``/health`` (a server and the router both answer it), so that a wrong URL
    is one line before any progress is shown."""
    try:
        requests.get(f"{url}/health", timeout=timeout)
    except requests.RequestException as exc:
        raise EngramInputError(
            f"cannot reach {url} ({type(exc).__name__}): is the server or router running?"
        ) from exc


def complete(url: str, prompt: list[int], max_new_tokens: int, timeout: float) -> list[int]:
    """The server's greedy continuation of ``prompt`` (token ids; it stops after eos, as
    the reference model's ``generate`` does)."""
    body = {
        "input_ids": prompt,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens},
    }
    try:
        resp = requests.post(f"{url}/generate", json=body, timeout=timeout)
    except requests.RequestException as exc:
        raise EngramInputError(
            f"cannot reach {url} ({type(exc).__name__}): is the server or router running?"
        ) from exc
    if resp.status_code != 200:
        raise EngramInputError(
            f"{url}/generate answered {resp.status_code}: {resp.text.strip()[:300]}"
        )
    try:
        return [int(t) for t in resp.json()["output_ids"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise EngramInputError(f"{url}/generate answered without output_ids") from exc


def remote_exact_match(
    url: str,
    samples: Sequence[Sample],
    k: int,
    timeout: float = 120.0,
    show_progress: bool = False,
) -> RemoteScore:
    """Share of samples whose greedy completion of ``k`` tokens (fewer when the
    continuation is shorter) is the reference continuation."""
    url = url.rstrip("/")
    check_reachable(url, timeout)
    matches = 0
    with progress_bar(len(samples), "ablate --url", unit="request", show=show_progress) as bar:
        for sample in samples:
            n = min(k, len(sample.continuation))
            matches += complete(url, sample.prompt, n, timeout) == sample.continuation[:n]
            bar.update()
    return RemoteScore(url, matches / len(samples), len(samples), k)
