"""A Ray cluster across :class:`~engram_testing.netns_hosts.NetnsHosts`: the head on one
host, a node joining from each other one (``ray start --address``), as an operator
starts them on real machines.

Each node is ``ray start --block`` in its host, with ``--node-ip-address`` (no host of a
closed network can guess it), the label ``host=<name>``, the custom resource
``host-<name>: 1`` and a temp directory of its own (the hosts share one file system).
``start_node`` starts a host's node again after the host was lost. Every Ray process
lives in a host, so the hosts' ``close`` (or ``Host.kill_all``) ends them. Ray's token
authentication is on (``RAY_AUTH_MODE=token``, ``ENV``: give it to every driver too); the
hosts share this machine's token file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from engram_testing.netns_hosts import NetnsHosts

READY = "Ray runtime started"
HEAD_PORT = 6379  # each host has its own ports: no other Ray can hold it there
START_S = 180.0
# NOTE: Ray's memory monitor off, as `up` runs its own Ray: it kills actors when the
# machine runs low, whoever holds the memory (here: the other tests on this machine).
ENV = {
    "RAY_AUTH_MODE": "token",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_memory_monitor_refresh_ms": "0",
}


@dataclass
class RayHosts:
    hosts: NetnsHosts
    head: str = "a"
    env: dict[str, str] = field(default_factory=dict)  # on top of this process's, for every node
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict, init=False)

    @property
    def address(self) -> str:
        return f"{self.hosts[self.head].address}:{HEAD_PORT}"

    def start(self) -> RayHosts:
        """The head, then every other host's node (in parallel); back once all have joined."""
        self.start_node(self.head)
        others = [n for n in self.hosts.hosts if n != self.head]
        threads = [threading.Thread(target=self.start_node, args=(n,)) for n in others]
        [t.start() for t in threads]
        [t.join() for t in threads]
        missing = [
            n for n in others if self.nodes.get(n) is None or self.nodes[n].poll() is not None
        ]
        if missing:
            raise RuntimeError(f"Ray nodes of hosts {missing} did not start")
        return self

    def start_node(self, name: str) -> subprocess.Popen:
        """``ray start --block`` in host ``name`` (the head for ``self.head``); returns once
        it says the node runs."""
        host = self.hosts[name]
        argv = [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--block"]
        argv += ["--node-ip-address", host.address, "--labels", f"host={name}"]
        argv += ["--resources", json.dumps({f"host-{name}": 1})]
        argv += ["--temp-dir", str(self.hosts.scratch / name), "--disable-usage-stats"]
        if name == self.head:
            argv += ["--head", "--port", str(HEAD_PORT), "--include-dashboard", "false"]
        else:
            argv += ["--address", self.address]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | ENV | self.env
        proc = host.popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.nodes[name] = proc
        lines: list[str] = []
        deadline = time.monotonic() + START_S
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if READY in line:
                break
            if time.monotonic() > deadline:
                break
        if not any(READY in line for line in lines):
            raise RuntimeError(f"ray start on host {name} failed:\n{''.join(lines[-20:])}")
        # NOTE: keep draining its output, so that it never blocks on a full pipe.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        return proc
