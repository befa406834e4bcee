"""The sglang-router's worker-management API (sglang-router 0.3.2).

``GET /workers`` lists the registered workers (id, url, worker_type, is_healthy,
bootstrap_port); ``POST /workers`` with ``{"url", "worker_type", "bootstrap_port"}``
queues a registration and ``DELETE /workers/{id}`` a removal (both answer 202 and finish
in the background). Registering a URL that is already registered is a no-op.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class RouterError(RuntimeError):
    """The router did not answer, or answered with an error."""


def _request(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:200]
        raise RouterError(f"{method} {url}: HTTP {exc.code} {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RouterError(f"{method} {url}: {exc}") from None
    return json.loads(raw) if raw else None


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def list_workers(router_url: str) -> list[dict[str, Any]]:
    return list(_request("GET", f"{router_url}/workers").get("workers", []))


def find_worker(router_url: str, worker_url: str) -> dict[str, Any] | None:
    for worker in list_workers(router_url):
        if _same_url(worker.get("url", ""), worker_url):
            return worker
    return None


def add_worker(router_url: str, worker_url: str, role: str, bootstrap_port: int | None) -> None:
    body: dict[str, Any] = {"url": worker_url, "worker_type": role}
    if bootstrap_port is not None:
        body["bootstrap_port"] = bootstrap_port
    _request("POST", f"{router_url}/workers", body)


def remove_worker(router_url: str, worker_id: str) -> None:
    _request("DELETE", f"{router_url}/workers/{worker_id}")
