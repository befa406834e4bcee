"""The several-hosts harness (``engram_testing.netns_hosts``): hosts that reach each other
and this process at their own addresses, with no default route until given one; all of
it gone after a failure in the block, and what a killed owner left swept by the next."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from engram_testing.netns_hosts import NetnsHosts, _namespaces, sweep_stale, unavailable

from test.cluster.util import alive, wait_for

SERVE = "import http.server, sys; http.server.HTTPServer((sys.argv[1], 8080), http.server.SimpleHTTPRequestHandler).serve_forever()"
FETCH = "import sys, urllib.request; print(urllib.request.urlopen(f'http://{sys.argv[1]}:8080/').status)"
GUESS = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('8.8.8.8', 80)); print(s.getsockname()[0])"


@pytest.fixture(autouse=True)
def needs_root():
    if why := unavailable():
        pytest.skip(why)


def _left(tag: str) -> list[str]:
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    gone = tag.replace("-", "")
    return [ns for ns in _namespaces() if ns.startswith(tag)] + [
        line for line in links.splitlines() if line.startswith(gone)
    ]


def test_hosts_reach_each_other_and_are_removed_after_a_failure():
    with pytest.raises(RuntimeError, match="a failing test"), NetnsHosts(("x", "y")) as hosts:
        x, y = hosts["x"], hosts["y"]
        tag, server = hosts.tag, x.popen([sys.executable, "-c", SERVE, x.address])
        wait_for(lambda: (x.address, 8080, server.pid) in x.listening(), 30, "the server")
        fetched = y.run([sys.executable, "-c", FETCH, x.address], capture_output=True, text=True)
        assert fetched.stdout.strip() == "200", fetched.stderr
        out = subprocess.run(  # this process, through its leg on the bridge
            [sys.executable, "-c", FETCH, x.address], capture_output=True, text=True
        )
        assert out.stdout.strip() == "200", out.stderr
        # A closed network: no route to guess an address from; then a default route
        # through another network, where the guess is that network's address.
        assert (
            "unreachable"
            in y.run([sys.executable, "-c", GUESS], capture_output=True, text=True).stderr
        )
        y.set_default_route(True)
        guessed = y.run([sys.executable, "-c", GUESS], capture_output=True, text=True).stdout
        assert guessed.startswith("198.18.") and y.address not in guessed
        raise RuntimeError("a failing test")
    server.wait(timeout=10)
    assert _left(tag) == [] and not hosts.scratch.exists()


def test_what_a_killed_owner_left_is_swept():
    """A process that made hosts (a sleeper in one) and was SIGKILLed: the next sweep
    kills what runs in them and removes them, and nothing of a live owner."""
    code = (
        "import os, signal, subprocess; from engram_testing.netns_hosts import NetnsHosts; "
        "h = NetnsHosts(('p',)).__enter__(); "
        "s = h['p'].popen(['sleep', '600'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "print(h.tag, s.pid, h.scratch, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    tag, pid, scratch = out.stdout.split()
    assert _left(tag) and alive(int(pid))
    with NetnsHosts(("mine",)) as mine:
        # NOTE: entering sweeps too: the killed owner's hosts went before these were made.
        assert _left(tag) == [] and sweep_stale() == []
        assert _left(mine.tag)  # a live owner's hosts stay
    deadline = time.monotonic() + 10
    while alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(int(pid)) and not Path(scratch).exists()
