"""The cluster's keys: what closes its workers and its router to strangers.

``up`` keeps them in the cluster's state directory, each in a file only its user can read
(0600), made on the first ``up`` and kept for the next ones (clients keep working):

- ``admin.key``: every worker's ``--admin-api-key`` (its management endpoints: flush the
  cache, update weights, shut down) and the router's control plane (listing, adding and
  removing workers);
- ``client.key``: what clients send to the router, ``Authorization: Bearer KEY`` (the
  router's ``--api-key``), and every worker's ``--api-key``; or the spec's
  ``router.api_key_file``, a key of the clients' own.

NOTE: sglang-router 0.3.2 passes each request's own ``Authorization`` header on to the
workers; its ``--api-key`` only checks the header, and authenticates the router's own
calls (health checks, ``/server_info``). So the workers' ``--api-key`` is the clients' key,
and the admin key is a second one. SGLang lets ``/health`` and ``/metrics`` through without
a key: the supervisor's health checks and the Engram gauges need none.

A key never appears in a command line, a plan or a log: the supervisor gives a process
its keys in a private ``--config`` file and redacts them from its log (``supervisor``).
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from engram.files import atomic_write
from sglang_engram.cluster.spec import ClusterError, ClusterSpec, ClusterSpecError
from sglang_engram.cluster.state import run_dir

ADMIN_FILE = "admin.key"
CLIENT_FILE = "client.key"


@dataclass(frozen=True, repr=False)
class ClusterKeys:
    admin: str
    client: str

    def __repr__(self) -> str:
        return "ClusterKeys(<redacted>)"

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.admin, self.client)

    @property
    def worker_config(self) -> dict[str, Any]:
        """A worker's ``--config`` entries."""
        return {"api-key": self.client, "admin-api-key": self.admin}

    @property
    def router_config(self) -> dict[str, Any]:
        """The router's ``--config`` entries (``router_main``): the control plane's one
        key, as ``id:name:role:key``."""
        return {
            "api-key": self.client,
            "control-plane-api-keys": [f"up:launcher:admin:{self.admin}"],
        }


def bearer(key: str | None) -> dict[str, str]:
    """The header that sends ``key`` (none for None)."""
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def key_files(spec: ClusterSpec) -> tuple[Path, Path]:
    """Where the cluster's admin key and its clients' key are kept."""
    home = run_dir(spec.name)
    client = spec.router.api_key_file
    return home / ADMIN_FILE, Path(client) if client else home / CLIENT_FILE


def client_key(spec: ClusterSpec) -> str:
    """The key clients of the cluster send (its file made by `up`)."""
    return read_key(key_files(spec)[1])


def load_keys(spec: ClusterSpec) -> ClusterKeys:
    """The cluster's keys, made where they are missing."""
    admin, client = key_files(spec)
    if spec.router.api_key_file:
        return ClusterKeys(_own_key(admin), read_key(client, ClusterSpecError))
    return ClusterKeys(_own_key(admin), _own_key(client))


def read_key(path: Path, error: type[ClusterError] = ClusterError) -> str:
    """The key in ``path`` (its first line), refused where other users may read it."""
    try:
        info = path.stat()
        key = path.read_text().strip()
    except OSError as exc:
        raise error(f"cannot read the key file {path}: {exc.strerror}") from None
    if stat.S_IMODE(info.st_mode) & 0o077 or info.st_uid != os.geteuid():
        raise error(
            f"the key file {path} is not private (mode {stat.S_IMODE(info.st_mode):o}, "
            f"owner uid {info.st_uid}): chmod 600 it, as its owner"
        )
    if not key or any(c.isspace() or not c.isprintable() for c in key):
        raise error(f"the key file {path} holds no key (one line of printable characters)")
    return key


def _own_key(path: Path) -> str:
    if path.exists():
        return read_key(path)

    def write(f: IO[bytes]) -> None:
        # NOTE: private before the key is written; atomic_write keeps the mode.
        os.fchmod(f.fileno(), 0o600)
        f.write(secrets.token_urlsafe(32).encode() + b"\n")

    atomic_write(path, write)
    return read_key(path)
