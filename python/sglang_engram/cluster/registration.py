"""Keep one worker's registration with the router in step with its process.

A worker whose process is down is removed from the router (so no request is sent to
it); once its restarted process is healthy again it is registered anew, with its role
and bootstrap port. A restart that happens between two checks is caught by the
process's incarnation (its restart count): the router's entry for an earlier
incarnation is removed and replaced. The loop compares what should be with what the
router lists, so it also repairs the registration after the router itself restarts.

The router's API (sglang-router 0.3.2): ``GET /workers`` lists the workers (id, url,
worker_type, is_healthy, bootstrap_port); ``POST /workers`` queues a registration and
``DELETE /workers/{id}`` a removal (both answer 202 and finish in the background).
Each call sends the cluster's admin key (the router's control plane, ``keys``); a worker
is registered with the clients' key, which the router's own calls to it send.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import requests

from sglang_engram.cluster.keys import bearer

# A queued add/remove that the router has not applied after this long is sent again.
_PENDING_S = 30.0


class RouterError(RuntimeError):
    """The router did not answer, or answered with an error."""


def call(method: str, url: str, key: str | None, body: dict[str, Any] | None = None) -> Any:
    """A call to the router's control plane with ``key``; its JSON answer."""
    try:
        resp = requests.request(method, url, json=body, headers=bearer(key), timeout=5)
        resp.raise_for_status()
    except requests.HTTPError as exc:
        raise RouterError(
            f"{method} {url}: HTTP {exc.response.status_code} {exc.response.text[:200]}"
        ) from None
    except requests.RequestException as exc:
        raise RouterError(f"{method} {url}: {exc}") from None
    return resp.json() if resp.content else None


def list_workers(router_url: str, key: str | None) -> list[dict[str, Any]]:
    return list(call("GET", f"{router_url}/workers", key).get("workers", []))


def remove_worker(router_url: str, url: str, key: str | None) -> bool:
    """Ask the router to remove the worker at ``url``; whether it listed one."""
    listed = [w for w in list_workers(router_url, key) if w.get("url", "").rstrip("/") == url]
    for entry in listed:
        call("DELETE", f"{router_url}/workers/{entry['id']}", key)
    return bool(listed)


# () -> (should be registered: alive and healthy, incarnation: restarts so far)
WorkerState = Callable[[], tuple[bool, int]]


class RouterRegistrar:
    def __init__(
        self,
        url: str,
        role: str,
        bootstrap_port: int | None,
        worker_state: WorkerState,
        *,
        admin_key: str | None = None,
        api_key: str | None = None,
    ):
        self._body: dict[str, Any] = {"url": url, "worker_type": role}
        if bootstrap_port is not None:
            self._body["bootstrap_port"] = bootstrap_port
        if api_key is not None:
            self._body["api_key"] = api_key
        self._key = admin_key
        self._worker_state = worker_state
        self._router_url: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._incarnation = 0  # the incarnation the router's entry was made for
        self._pending: tuple[str, float] | None = None
        self._snapshot: dict[str, Any] = dict(
            registered=None, worker_id=None, reregistrations=0, removals=0, error=None
        )

    def attach(self, router_url: str, interval_s: float = 2.0) -> None:
        """Start reconciling against the router at ``router_url``, which registered the
        worker's current incarnation from its command line."""
        self._router_url = router_url.rstrip("/")
        self._incarnation = self._worker_state()[1]
        self._tick()  # NOTE: so that status is accurate from the moment `up` says ready
        threading.Thread(target=self._loop, args=(interval_s,), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"router": self._router_url, **self._snapshot}

    def _loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self._tick()

    def _tick(self) -> None:
        try:
            self._reconcile()
            error = None
        except RouterError as exc:
            error = str(exc)
        with self._lock:
            self._snapshot["error"] = error

    def _reconcile(self) -> None:
        assert self._router_url is not None
        want, incarnation = self._worker_state()
        url = self._body["url"].rstrip("/")
        listed = list_workers(self._router_url, self._key)
        entry = next((w for w in listed if w.get("url", "").rstrip("/") == url), None)
        pending, counts = self._pending, self._snapshot
        if pending is not None:
            action, since = pending
            if (action == "add") == (entry is not None) or time.monotonic() - since > _PENDING_S:
                pending = None
        stale = entry is not None and incarnation != self._incarnation
        if pending is None and entry is not None and (stale or not want):
            call("DELETE", f"{self._router_url}/workers/{entry['id']}", self._key)
            pending = ("remove", time.monotonic())
            with self._lock:
                counts["removals"] += 1
        elif pending is None and entry is None and want:
            call("POST", f"{self._router_url}/workers", self._key, self._body)
            pending = ("add", time.monotonic())
            self._incarnation = incarnation
            with self._lock:
                counts["reregistrations"] += 1
        self._pending = pending
        with self._lock:
            # NOTE: a worker whose removal is queued no longer counts as registered.
            counts["registered"] = entry is not None and (pending is None or pending[0] == "add")
            counts["worker_id"] = None if entry is None else entry.get("id")
