"""The longest prompt each worker takes, compared across a PD deployment's roles.

SGLang refuses a prompt that does not fit a server's KV pool (or its context), and so
does our request guard, on every worker. Through PD, though, the router sends each
request to a prefill and a decode worker at once: a prompt the decode worker refuses
but the prefill worker takes leaves the prefill worker waiting for a decode peer that
never comes, and the client gets its error only after SGLang's bootstrap timeout
(``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT``, 300 s). ``up`` warns when that can happen.
"""

from __future__ import annotations

from collections.abc import Mapping

import requests

from sglang_engram.cluster.keys import bearer


def longest_prompt(url: str, key: str | None = None) -> int | None:
    """Prompts of fewer tokens than this fit the server at ``url``, asked with ``key``
    (None: unknown)."""
    try:
        info = requests.get(f"{url}/server_info", headers=bearer(key), timeout=10).json()
        return int(info["max_req_input_len"])
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None


def mismatch(limits: Mapping[str, tuple[str, int | None]]) -> str | None:
    """A warning when some decode worker takes shorter prompts than some prefill worker
    (``limits``: worker name -> (role, its longest prompt)); None when none does."""
    known = {name: (role, n) for name, (role, n) in limits.items() if n is not None}
    prefill = {name: n for name, (role, n) in known.items() if role == "prefill"}
    decode = {name: n for name, (role, n) in known.items() if role == "decode"}
    if not prefill or not decode:
        return None
    p_name = max(prefill, key=prefill.__getitem__)
    d_name = min(decode, key=decode.__getitem__)
    if decode[d_name] >= prefill[p_name]:
        return None
    return (
        f"warning: {p_name} takes prompts of up to {prefill[p_name] - 1} tokens but "
        f"{d_name} only {decode[d_name] - 1} (its KV pool): a prompt in between waits for "
        "SGLang's PD bootstrap timeout (300 s) before it fails. Give the prefill workers "
        f"--context-length {decode[d_name]} or lower, or the decode workers more KV memory"
    )
