"""Keep one worker's registration with the router in step with its process.

A worker whose process is down is removed from the router (so no request is sent to
it); once its restarted process is healthy again it is registered anew, with its role
and bootstrap port. A restart that happens between two checks is caught by the
process's incarnation (its restart count): the router's entry for an earlier
incarnation is removed and replaced. The loop compares what should be with what the
router lists, so it also repairs the registration after the router itself restarts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang_engram.cluster import router_api

# A queued add/remove that the router has not applied after this long is sent again.
_PENDING_S = 30.0


@dataclass(frozen=True)
class Registration:
    worker_url: str
    role: str
    bootstrap_port: int | None


# () -> (should be registered: alive and healthy, incarnation: restarts so far)
WorkerState = Callable[[], tuple[bool, int]]


class RouterRegistrar:
    def __init__(self, registration: Registration, worker_state: WorkerState) -> None:
        self.registration = registration
        self._worker_state = worker_state
        self._router_url: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._registered: bool | None = None
        self._incarnation = 0  # the incarnation the router's entry was made for
        self._worker_id: str | None = None
        self._reregistrations = 0
        self._removals = 0
        self._error: str | None = None
        self._pending: tuple[str, float] | None = None

    def attach(self, router_url: str, interval_s: float = 2.0) -> None:
        """Start reconciling against the router at ``router_url``, which registered the
        worker's current incarnation from its command line."""
        self._router_url = router_url.rstrip("/")
        self._incarnation = self._worker_state()[1]
        self._tick()  # NOTE: so that status is accurate from the moment `up` says ready
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, args=(interval_s,), name="router-registrar", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "router": self._router_url,
                "registered": self._registered,
                "worker_id": self._worker_id,
                "reregistrations": self._reregistrations,
                "removals": self._removals,
                "error": self._error,
            }

    def _loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self._tick()

    def _tick(self) -> None:
        try:
            self._reconcile()
            error = None
        except router_api.RouterError as exc:
            error = str(exc)
        with self._lock:
            self._error = error

    def _reconcile(self) -> None:
        assert self._router_url is not None
        reg = self.registration
        want, incarnation = self._worker_state()
        entry = router_api.find_worker(self._router_url, reg.worker_url)
        pending = self._pending
        if pending is not None:
            action, since = pending
            done = (action == "add") == (entry is not None)
            if done or time.monotonic() - since > _PENDING_S:
                pending = None
        stale = entry is not None and incarnation != self._incarnation
        if pending is None and entry is not None and (stale or not want):
            router_api.remove_worker(self._router_url, entry["id"])
            pending = ("remove", time.monotonic())
            with self._lock:
                self._removals += 1
        elif pending is None and entry is None and want:
            router_api.add_worker(self._router_url, reg.worker_url, reg.role, reg.bootstrap_port)
            pending = ("add", time.monotonic())
            self._incarnation = incarnation
            with self._lock:
                self._reregistrations += 1
        with self._lock:
            self._pending = pending
            # NOTE: a worker whose removal is queued no longer counts as registered.
            self._registered = entry is not None and (pending is None or pending[0] == "add")
            self._worker_id = None if entry is None else entry.get("id")
