"""Connecting to Ray: an existing cluster (``--address`` / ``RAY_ADDRESS``) or a local one,
which is started inside the ``up`` process and lives exactly as long as it."""

from __future__ import annotations

import logging
import socket

from sglang_engram.cluster.spec import ClusterError


class RayUnreachable(ClusterError):
    """The Ray cluster named by the address does not answer."""


def connect(address: str | None, namespace: str, *, num_gpus: float | None = None) -> str:
    """Join (or, without an address, start) a Ray cluster; return its GCS address."""
    import ray

    common = dict(namespace=namespace, log_to_driver=False, logging_level=logging.WARNING)
    if not address:
        # NOTE: the launcher puts nothing in Ray's object store; a small one spares /dev/shm.
        # Ray's memory monitor is off: it kills actors when the *node* runs low, whoever
        # holds the memory, and an actor killed takes its server down for good; the
        # kernel's OOM killer takes one process, which its supervisor restarts.
        ray.init(
            address="local",
            num_gpus=num_gpus,
            include_dashboard=False,
            object_store_memory=256 << 20,
            _system_config={"memory_monitor_refresh_ms": 0},
            **common,
        )
        return ray.get_runtime_context().gcs_address
    try:
        if address != "auto" and "://" not in address and ":" in address:
            # NOTE: fail fast on a host:port that is down; Ray itself retries for a minute.
            host, port = address.rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=3).close()
        ray.init(address=address, **common)
    except (OSError, ValueError) as exc:
        raise RayUnreachable(
            f"cannot connect to the Ray cluster at {address} ({exc}); if it uses token "
            "authentication, set RAY_AUTH_MODE=token"
        ) from None
    return address
