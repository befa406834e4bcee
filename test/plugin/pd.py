"""Send requests to a prefill and a decode server the way SGLang's PD router does."""

from __future__ import annotations

import json
import random
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def _post(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(
        f"{url}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.loads(r.read())
    return out if isinstance(out, list) else [out]


def generate_pd(
    prefill: str, decode: str, bootstrap_port: int, prompts: list[str], max_new_tokens: int = 32
) -> list[str]:
    """Each prompt goes to both servers with its own bootstrap room; decode answers.
    One prompt at a time, like ``server.generate`` (outputs then compare exactly)."""
    out = []
    for prompt in prompts:
        body = {
            "text": prompt,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens},
            "bootstrap_host": "127.0.0.1",
            "bootstrap_port": bootstrap_port,
            "bootstrap_room": random.getrandbits(63),
        }
        with ThreadPoolExecutor(2) as pool:
            pending_prefill = pool.submit(_post, prefill, body)
            decoded = pool.submit(_post, decode, body).result()
            pending_prefill.result()
        out.append(decoded[0]["text"])
    return out
