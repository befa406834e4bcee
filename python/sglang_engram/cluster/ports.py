"""A server's TCP ports on the node that runs it: whether one is taken and by whom, a
bind failure in its log, and the kernel's ephemeral range.

NOTE: a port in the ephemeral range (``net.ipv4.ip_local_port_range``) can be taken at
any moment by an outgoing connection of any process (Ray's own, the KV transfer's), and
an SGLang worker binds its HTTP port only once its model is loaded, tens of seconds after
it starts: the spec's ports belong below that range (the defaults are).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from pathlib import Path

import psutil

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# uvicorn's line (asyncio and uvloop alike) when the HTTP port is taken; SGLang then
# waits in "Waiting for application shutdown" instead of exiting.
BIND_ERROR = re.compile(r"error while attempting to bind on address \('[^']*', (\d+)\)")


def in_use(port: int, host: str = "0.0.0.0") -> bool:
    """Whether binding ``host:port`` fails, tried as SGLang binds it (SO_REUSEADDR: a
    port in TIME_WAIT after its previous server is free)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def holder(port: int) -> str:
    """Who holds ``port`` on this node, ``held by ...``, as far as this user can see."""
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.pid is not None:
                what = ""
                with contextlib.suppress(psutil.Error):
                    what = " ".join(psutil.Process(conn.pid).cmdline())[:120]
                return f"held by pid {conn.pid}" + (f" ({what})" if what else "")
    return "held by a process this user cannot see (or an outgoing connection)"


class BindWatch:
    """A server's log from now on (one incarnation's output, read as it comes), watched
    for a bind failure of one of ``ports``."""

    def __init__(self, log_path: str, ports: tuple[int, ...]) -> None:
        self.path, self.ports = log_path, ports
        try:
            self.offset = os.path.getsize(log_path)
        except OSError:
            self.offset = 0
        self._tail = b""  # NOTE: the last read's end, so a line split across reads matches

    def failed_port(self) -> int | None:
        """The first of the ports that the log, since the last call, says was taken."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                new = f.read()
        except OSError:
            return None
        self.offset += len(new)
        text, self._tail = self._tail + new, (self._tail + new)[-200:]
        for match in BIND_ERROR.finditer(text.decode(errors="replace")):
            if int(match[1]) in self.ports:
                return int(match[1])
        return None


def ephemeral_range() -> range | None:
    """The ports the kernel hands to outgoing connections (None where it does not say)."""
    try:
        low, high = (int(x) for x in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return None
    return range(low, high + 1)


def ephemeral_warning(ports: dict[str, int]) -> str | None:
    """A warning naming those of ``ports`` (what each is → the port) that lie in this
    machine's ephemeral range."""
    span = ephemeral_range()
    if span is None or not (inside := [f"{k} {p}" for k, p in ports.items() if p in span]):
        return None
    return (
        f"{', '.join(inside)} lie in this machine's ephemeral port range "
        f"{span.start}-{span.stop - 1} (net.ipv4.ip_local_port_range): any outgoing "
        f"connection may take one before its server binds it; choose ports below {span.start}"
    )
