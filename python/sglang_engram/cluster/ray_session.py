"""Connecting to Ray: an existing cluster (``--address`` / ``RAY_ADDRESS``) or a local one,
which is started inside the ``up`` process and lives exactly as long as it."""

from __future__ import annotations

import importlib.util
import logging
import socket

from sglang_engram.cluster.layout import Node

AUTH_MODE_ENV = "RAY_AUTH_MODE"
# NOTE: the launcher puts nothing in Ray's object store; a small one spares /dev/shm.
_LOCAL_OBJECT_STORE_BYTES = 256 << 20


class RayUnreachable(ConnectionError):
    """The Ray cluster named by the address does not answer."""


def missing_packages() -> list[str]:
    """The packages of the ``cluster`` extra that cannot be imported here."""
    missing = []
    for module, package in (("ray", "Ray"), ("sglang_router", "sglang-router")):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(package)
    return missing


def connect(
    address: str | None, namespace: str, *, num_gpus: float | None = None
) -> tuple[str, bool]:
    """Join (or, without an address, start) a Ray cluster; return its GCS address and
    whether this process started it."""
    import ray

    common = dict(namespace=namespace, log_to_driver=False, logging_level=logging.WARNING)
    if address:
        check_reachable(address)
        try:
            ray.init(address=address, **common)
        except ConnectionError as exc:
            raise RayUnreachable(
                f"cannot connect to the Ray cluster at {address} ({exc}); if it uses token "
                f"authentication, set {AUTH_MODE_ENV}=token"
            ) from None
        return address, False
    ray.init(
        address="local",
        num_gpus=num_gpus,
        include_dashboard=False,
        object_store_memory=_LOCAL_OBJECT_STORE_BYTES,
        **common,
    )
    return ray.get_runtime_context().gcs_address, True


def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast (Ray itself retries for a minute) when a host:port address is down."""
    if address == "auto" or "://" in address or ":" not in address:
        return
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        raise RayUnreachable(f"cannot reach the Ray cluster at {address}") from None


def cluster_nodes() -> list[Node]:
    """The live nodes with GPUs, as Ray accounts them."""
    import ray

    nodes = []
    for n in ray.nodes():
        gpus = n.get("Resources", {}).get("GPU", 0)
        if n.get("Alive") and gpus > 0:
            nodes.append(Node(ip=n["NodeManagerAddress"], gpus=gpus, node_id=n["NodeID"]))
    return nodes


def disconnect() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
