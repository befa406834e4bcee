"""Several hosts on one Linux machine: network namespaces joined by a bridge, for the
multi-host tests and benchmarks.

Each host is a network namespace with one interface (``eth0``) and its own address in
a private /24 the harness picks (one no route of this machine covers). The bridge lives
in a namespace of its own (the switch), so the machine's own network is untouched but
for one leg: an interface in this process's namespace with the /24's last address,
through which the tests reach every host. Without ``default_route`` the hosts have no
default route (a closed cluster network: an address guessed from "the route to the
internet" does not exist); ``set_default_route`` gives a host one through a second
interface (``uplink``, another network, where a guessed address would be the wrong one).

Everything is named ``egnh-<pid>-...`` after the process that made it: ``close`` kills
every process in the hosts (``ip netns pids``) and deletes the namespaces (their links go
with them), and ``sweep_stale`` removes what a process that has died left behind.
Needs root and iproute2; ``unavailable`` says why not, in one line.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "egnh"
SWITCH = "sw"
CLIENT_HOST = 254  # the tests' leg on the bridge: x.y.z.254
UPLINK_NET = "198.18.0.0/24"  # RFC 2544 benchmarking range: the decoy uplink's
_OWNED = re.compile(rf"^{PREFIX}-(\d+)-")


def unavailable() -> str | None:
    """Why network-namespace hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network-namespace hosts need root"
    if shutil.which("ip") is None:
        return "network-namespace hosts need iproute2's `ip`"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Host:
    """One namespace: a host at ``address``."""

    name: str
    netns: str
    address: str
    index: int

    def argv(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(argv), **kw)

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen:
        # NOTE: `ip netns exec` execs the command: the Popen's pid is the command's.
        return subprocess.Popen(self.argv(argv), **kw)

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def kill_all(self, timeout_s: float = 30.0) -> list[int]:
        """SIGKILL every process of the host at once, as when the machine dies: all are
        stopped first (none acts on the others' deaths), then killed; again until none is
        left (one may have forked meanwhile). Returns the pids killed."""
        killed: list[int] = []
        deadline = time.monotonic() + timeout_s
        while pids := [p for p in self.pids() if p not in killed or _alive(p)]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"host {self.name}: processes {pids} outlived SIGKILL")
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
            killed += [p for p in pids if p not in killed]
            time.sleep(0.2)
        return killed

    def set_default_route(self, on: bool) -> None:
        """A default route through ``uplink`` (a network of its own, ``UPLINK_NET``), or none."""
        net = ipaddress.ip_network(UPLINK_NET)
        me, gateway = net[10 + self.index], net[1]
        if on:
            _ip(["link", "add", "uplink", "type", "veth", "peer", "name", "uplink-peer"], self)
            _ip(["addr", "add", f"{me}/{net.prefixlen}", "dev", "uplink"], self)
            for link in ("uplink", "uplink-peer"):
                _ip(["link", "set", "dev", link, "up"], self)
            _ip(["route", "add", "default", "via", str(gateway), "dev", "uplink"], self)
        else:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip(["link", "del", "uplink"], self)

    def routes(self) -> list[dict[str, Any]]:
        return json.loads(_ip(["-j", "route"], self) or "[]")

    def listening(self) -> list[tuple[str, int, int]]:
        """The host's listening TCP sockets: (address, port, pid of each holder)."""
        out = self.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
        found = []
        for line in out.splitlines():
            address, _, port = line.split()[3].rpartition(":")
            for pid in re.findall(r"pid=(\d+)", line):
                found.append((address.strip("[]"), int(port), int(pid)))
        return found


@dataclass
class NetnsHosts:
    """``names`` hosts on one bridge; a context manager (``close`` on exit)."""

    names: tuple[str, ...] = ("a", "b", "c")
    default_route: bool = False
    hosts: dict[str, Host] = field(default_factory=dict, init=False)
    client_address: str = field(default="", init=False)
    scratch: Path = field(default=Path(), init=False)  # a directory removed with the hosts

    def __post_init__(self) -> None:
        self.tag = f"{PREFIX}-{os.getpid()}"
        self.leg = f"{PREFIX}{os.getpid()}"  # NOTE: a link name has at most 15 characters

    def __enter__(self) -> NetnsHosts:
        sweep_stale()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def _build(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
        net = _free_subnet()
        switch = Host(SWITCH, f"{self.tag}-{SWITCH}", "", -1)
        _ip(["netns", "add", switch.netns])
        _ip(["link", "add", "br0", "type", "bridge"], switch)
        _ip(["link", "set", "dev", "br0", "up"], switch)
        for i, name in enumerate(self.names):
            host = Host(name, f"{self.tag}-{name}", str(net[1 + i]), i)
            _ip(["netns", "add", host.netns])
            _veth(name, "eth0", host.netns, switch)
            self._plug(switch, name)
            _ip(["addr", "add", f"{host.address}/{net.prefixlen}", "dev", "eth0"], host)
            for link in ("lo", "eth0"):
                _ip(["link", "set", "dev", link, "up"], host)
            self.hosts[name] = host
            if self.default_route:
                host.set_default_route(True)
        # The tests' leg: this namespace's end keeps its name, the switch's is `client`.
        _veth(self.leg, "client", switch.netns)
        self._plug(switch, "client")
        self.client_address = str(net[CLIENT_HOST])
        _ip(["addr", "add", f"{self.client_address}/{net.prefixlen}", "dev", self.leg])
        _ip(["link", "set", "dev", self.leg, "up"])

    @staticmethod
    def _plug(switch: Host, port: str) -> None:
        _ip(["link", "set", "dev", port, "master", "br0"], switch)
        _ip(["link", "set", "dev", port, "up"], switch)

    def close(self) -> None:
        """Kill every process in the hosts, delete them, the switch and the tests' leg."""
        _remove(self.tag, self.leg)
        self.hosts.clear()
        if self.scratch != Path():
            shutil.rmtree(self.scratch, ignore_errors=True)


def sweep_stale() -> list[str]:
    """Remove the namespaces, links and scratch directories of harnesses whose process
    has died (a test run killed before its cleanup); returns the tags removed."""
    names = [*_namespaces(), *(p.name for p in Path(tempfile.gettempdir()).glob(f"{PREFIX}-*"))]
    pids = {int(m[1]) for name in names if (m := _OWNED.match(name))}
    stale = [f"{PREFIX}-{pid}" for pid in sorted(pids) if not _alive(pid)]
    for tag in stale:
        _remove(tag, tag.replace("-", ""))
        for path in Path(tempfile.gettempdir()).glob(f"{tag}-*"):
            shutil.rmtree(path, ignore_errors=True)
    return stale


def _remove(tag: str, leg: str) -> None:
    owned = [ns for ns in _namespaces() if ns.startswith(f"{tag}-")]
    for ns in owned:
        Host(ns, ns, "", -1).kill_all()
    for ns in owned:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    subprocess.run(["ip", "link", "del", leg], capture_output=True)
    # NOTE: the kernel destroys a deleted namespace's links asynchronously; wait, so
    # that the next harness sees the machine as it was.
    deadline = time.monotonic() + 10
    while _link_exists(leg) and time.monotonic() < deadline:
        time.sleep(0.1)


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def _free_subnet() -> ipaddress.IPv4Network:
    """A random 10.x.y.0/24 that no route or address of this machine overlaps."""
    used = [ipaddress.ip_network(UPLINK_NET)]
    for route in json.loads(_ip(["-j", "-4", "route", "show", "table", "all"]) or "[]"):
        if route.get("dst", "default") != "default":
            used.append(ipaddress.ip_network(route["dst"], strict=False))
    for link in json.loads(_ip(["-j", "-4", "addr"]) or "[]"):
        for a in link.get("addr_info", []):
            used.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    for _ in range(1000):
        net = ipaddress.ip_network(f"10.{random.randint(1, 254)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 on this machine")


def _veth(name: str, peer: str, peer_netns: str, where: Host | None = None) -> None:
    """A veth pair: ``name`` in ``where`` (default: this namespace), ``peer`` in ``peer_netns``."""
    _ip(
        ["link", "add", "name", name, "type", "veth", "peer", "name", peer, "netns", peer_netns],
        where,
    )


def _ip(argv: list[str], host: Host | None = None) -> str:
    cmd = ["ip", *argv] if host is None else ["ip", "-n", host.netns, *argv]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # NOTE: a zombie is dead; only its parent's wait removes it.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False
