"""The soak's load: streaming greedy requests at a fixed concurrency, each timed, and what
a client saw when one did not complete.

Requests go as ``sglang.benchmark.serving`` sends them to SGLang's native ``/generate``
(token ids, ``stream: true``, greedy, ``ignore_eos``), one at a time per client thread.
Prompts are real text (held-out Python source of the standard library, the prefix of a
piece drawn from a small pool, so requests share prefixes and hit the prefill's prefix
cache) or fresh random token ids. Every request ends as an :class:`Outcome`: completed
(``[DONE]``, finish reason ``length``, every token there) or failed with its ``cause``,
one short line that names what failed (an HTTP status and the router's error code, an
abort message from SGLang, a stream cut short, a connection refused or reset).
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests
from sglang_engram.cluster.keys import bearer

CONNECT_TIMEOUT_S = 5.0
FAILURE_BACKOFF_S = 1.0


@dataclass(frozen=True)
class Outcome:
    prompt: tuple[int, ...]
    max_new_tokens: int
    sent: float  # time.time() when the request went out
    waited_s: float  # until its last byte (its answer or its error)
    output_ids: tuple[int, ...] = ()
    cause: str | None = None  # None: completed
    detail: str = ""
    first_byte_s: float | None = None
    cached_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.cause is None

    @property
    def ended(self) -> float:
        return self.sent + self.waited_s


def send(
    url: str, prompt: list[int], max_new_tokens: int, timeout_s: float, key: str | None = None
) -> Outcome:
    """One streaming greedy request to ``url``/generate (with the client ``key``)."""
    body = {
        "input_ids": prompt,
        "stream": True,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": max_new_tokens,
            "ignore_eos": True,
        },
    }
    sent, start = time.time(), time.monotonic()
    first: float | None = None
    events: list[dict] = []
    done, cause, detail = False, None, ""
    try:
        with requests.post(
            f"{url}/generate",
            json=body,
            headers=bearer(key),
            stream=True,
            timeout=(CONNECT_TIMEOUT_S, timeout_s),
        ) as r:
            first = time.monotonic() - start
            if r.status_code != 200:
                cause, detail = _http_error(r.status_code, r.text)
            else:
                for line in r.iter_lines():
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        break
                    events.append(json.loads(data))
                    if time.monotonic() - start > timeout_s:
                        raise requests.ReadTimeout("the whole answer took too long")
    except requests.ConnectTimeout as exc:
        cause, detail = f"no connection within {CONNECT_TIMEOUT_S:g}s", str(exc)[:300]
    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
        cause, detail = _connection_error(exc, first is not None)
    except requests.Timeout as exc:
        cause, detail = f"no answer within {timeout_s:g}s (client timeout)", str(exc)[:300]
    except (requests.RequestException, ValueError) as exc:
        cause, detail = f"bad answer ({type(exc).__name__})", str(exc)[:300]
    waited = time.monotonic() - start
    last = events[-1] if events else {}
    meta = last.get("meta_info") or {}
    output = tuple(last.get("output_ids") or ())
    if cause is None:
        cause, detail = _stream_error(last, done, output, max_new_tokens)
    return Outcome(
        prompt=tuple(prompt),
        max_new_tokens=max_new_tokens,
        sent=sent,
        waited_s=waited,
        output_ids=output if cause is None else (),
        cause=cause,
        detail=detail,
        first_byte_s=first,
        cached_tokens=int(meta.get("cached_tokens") or 0),
    )


def _http_error(status: int, text: str) -> tuple[str, str]:
    """``503 server_selection_failed``: the status and the router's error code."""
    try:
        error = json.loads(text).get("error") or {}
        code = error.get("code") or error.get("type") or ""
        message = error.get("message") or text
    except (ValueError, AttributeError):
        code, message = "", text
    return f"{status} {code}".strip(), message[:300]


def _connection_error(exc: Exception, answered: bool) -> tuple[str, str]:
    text = str(exc)
    if answered:
        return "stream cut short", text[:300]
    if "refused" in text.lower():
        return "connection refused", text[:300]
    return "connection reset", text[:300]


def _stream_error(
    last: dict, done: bool, output: tuple[int, ...], max_new_tokens: int
) -> tuple[str | None, str]:
    """A 200 stream that did not complete: an error event, an abort, a cut."""
    if "error" in last:
        error = last["error"]
        message = error.get("message") if isinstance(error, dict) else error
        return "error event", json.dumps(message)[:300]
    finish = (last.get("meta_info") or {}).get("finish_reason") or {}
    if isinstance(finish, dict) and finish.get("type") == "abort":
        message = str(finish.get("message") or "")
        # NOTE: the cause keeps the message's head, which names what failed
        # ("Decode transfer failed", "Lost connection with prefill"); the rest is ids.
        return f"aborted: {' '.join(message.split()[:3])}", message[:300]
    if not done:
        return "stream cut short", f"{len(output)} of {max_new_tokens} tokens, no [DONE]"
    if len(output) != max_new_tokens:
        return "short answer", f"{len(output)} of {max_new_tokens} tokens, finish {finish}"
    return None, ""


@dataclass(frozen=True)
class Workload:
    """What each request asks: a prompt (text pieces or random ids) and a length."""

    pieces: tuple[tuple[int, ...], ...]  # empty: random ids
    vocab: int
    prompt_tokens: tuple[int, int]
    new_tokens: tuple[int, int]

    def draw(self, rng: random.Random) -> tuple[list[int], int]:
        length = rng.randint(*self.prompt_tokens)
        if self.pieces:
            prompt = list(rng.choice(self.pieces)[:length])
        else:
            prompt = [rng.randrange(8, self.vocab) for _ in range(length)]
        return prompt, rng.randint(*self.new_tokens)


def text_pieces(model_dir: Path, tokens: int, pool: int) -> tuple[tuple[int, ...], ...]:
    """``pool`` pieces of the held-out benchmark text, ``tokens`` long each (an error
    naming how many there are when there are fewer)."""
    from engram_testing.tiers.workload import heldout_ids

    return tuple(tuple(p) for p in heldout_ids(model_dir, tokens, pool))


@dataclass
class LoadDriver:
    """``concurrency`` client threads sending back to back until stopped (each waits
    ``FAILURE_BACKOFF_S`` after a failed request)."""

    url: str
    workload: Workload
    concurrency: int
    timeout_s: float
    seed: int
    key: str | None = None  # the client key the requests send
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._client, args=(i,), name=f"client-{i}", daemon=True)
            for i in range(self.concurrency)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, wait_s: float) -> None:
        """Send nothing more; wait up to ``wait_s`` for the requests in flight."""
        self._stop.set()
        deadline = time.monotonic() + wait_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def snapshot(self) -> list[Outcome]:
        with self._lock:
            return list(self.outcomes)

    def _client(self, i: int) -> None:
        rng = random.Random(self.seed * 1000 + i)
        while not self._stop.is_set():
            prompt, new = self.workload.draw(rng)
            outcome = send(self.url, prompt, new, self.timeout_s, self.key)
            with self._lock:
                self.outcomes.append(outcome)
            if not outcome.ok:
                # NOTE: a client backs off after a failure, as one would; a refused
                # request takes milliseconds, and the refusals would swamp the counts.
                self._stop.wait(FAILURE_BACKOFF_S)
