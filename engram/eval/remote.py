"""``ablate --url``: the same samples completed greedily by a running server.

The server is whatever the user deploys; it is reached through the OpenAI-compatible
completions API with the prompt as token ids, so both sides see exactly the same prompt
tokens. Its score is the local regime it decodes as: one SGLang server with Engram
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


@dataclass(frozen=True)
class RemoteScore:
    url: str
    exact_match: float
    samples: int
    k: int

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, "exact_match": self.exact_match, "samples": self.samples,
                "k": self.k}

    def table(self) -> str:
        return (f"{'server':<40}{f'exact@{self.k}':>12}\n{self.url:<40}{self.exact_match:>12.3f}\n"
                f"{self.samples} samples")


def served_model(url: str, timeout: float) -> str:
    """The first model id ``/v1/models`` lists ("default" when the route is missing);
    one clear error when nothing answers at ``url``."""
    try:
        resp = requests.get(f"{url}/v1/models", timeout=timeout)
    except requests.RequestException as exc:
        raise EngramInputError(
            f"cannot reach {url} ({type(exc).__name__}): is the server or router running?"
        ) from exc
    try:
        resp.raise_for_status()
        return str(resp.json()["data"][0]["id"])
    except (requests.RequestException, ValueError, KeyError, IndexError):
        return "default"


def complete(url: str, model: str, prompt: list[int], max_tokens: int, timeout: float) -> str:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    try:
        resp = requests.post(f"{url}/v1/completions", json=body, timeout=timeout)
        resp.raise_for_status()
        return str(resp.json()["choices"][0]["text"])
    except requests.RequestException as exc:
        raise EngramInputError(f"completion request to {url} failed: {exc}") from exc
    except (ValueError, KeyError, IndexError) as exc:
        raise EngramInputError(f"{url} answered /v1/completions without choices[0].text") from exc


def remote_exact_match(
    url: str, tokenizer: object, samples: Sequence[Sample], k: int, timeout: float = 120.0
) -> RemoteScore:
    """Share of samples whose greedy completion of ``k`` tokens (fewer when the
    continuation is shorter) is the reference continuation's text."""
    url = url.rstrip("/")
    model = served_model(url, timeout)
    matches = 0
    for sample in samples:
        n = min(k, len(sample.continuation))
        want = tokenizer.decode(sample.continuation[:n])  # type: ignore[attr-defined]
        matches += complete(url, model, sample.prompt, n, timeout) == want
    return RemoteScore(url, matches / len(samples), len(samples), k)
