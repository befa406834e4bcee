"""The cluster's state file: concurrent writers never break each other's writes, a reader
always sees one whole state, and `status` renders what `up` last wrote."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time

import psutil
import pytest
from sglang_engram.cluster.state import HOME_ENV, ClusterNotFound, ClusterState


def _state(name: str, phase: str) -> ClusterState:
    workers = [{"name": f"w-{i}"} for i in range(random.randint(1, 50))]
    return ClusterState(
        name=name,
        ray_address="127.0.0.1:1",
        local_ray=True,
        up_pid=os.getpid(),
        up_started=psutil.Process().create_time(),
        plan={"workers": workers, "router": {"url": "http://10.0.0.1:8000"}, "log_dir": "/logs"},
        phase=phase,
    )


def test_concurrent_writers_and_a_reader(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    name = f"c{random.randint(0, 10**6)}"
    errors: list[BaseException] = []
    seen: set[str] = set()
    start = threading.Barrier(4)

    def write(phase: str) -> None:
        start.wait()
        try:
            for _ in range(300):
                _state(name, phase).save()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    def read() -> None:
        start.wait()
        for _ in range(300):
            try:
                seen.add(ClusterState.load(name).phase)
            except ClusterNotFound:
                pass

    threads = [
        threading.Thread(target=write, args=(p,)) for p in ("starting", "running", "stopping")
    ]
    threads.append(threading.Thread(target=read))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert seen <= {"starting", "running", "stopping"}
    assert ClusterState.load(name).phase in {"starting", "running", "stopping"}
    assert [p.name for p in (tmp_path / name).iterdir()] == ["state.json"]  # no temp left


def test_a_state_whose_up_is_gone_is_recognised(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    state = _state("gone", "running")
    assert state.up_alive
    # The same pid started at another time is another process (a reused pid).
    other = ClusterState(**{**state.__dict__, "up_started": state.up_started - 1.0})
    assert not other.up_alive
    state.save()
    state.remove()
    with pytest.raises(ClusterNotFound, match="no cluster named 'gone'"):
        ClusterState.load("gone")


def test_status_shows_a_failed_worker_and_its_error(tmp_path, monkeypatch):
    """`status` reads what `up` last polled; a worker that failed shows why."""
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    name = f"s{random.randint(0, 10**6)}"
    error = f"cannot start: [Errno 2] No such file or directory: '/x/{random.randint(0, 99)}'"
    ok = {
        "state": "running",
        "restarts": 0,
        "max_restarts": 3,
        "pid": 11,
        "role": "decode",
        "router": {"registered": True},
        "engram": [],
    }
    state = _state(name, "running")
    workers = [
        {"name": n, "role": n[:-2], "engram_offload": o, "port": p, "bootstrap_port": None}
        | {"host": "10.0.0.1", "node_id": "ab" * 28}
        for n, o, p in (("prefill-0", "hbm", 30000), ("decode-0", "off", 30001))
    ]
    state.update(
        plan={**state.plan, "workers": workers},
        members={
            "prefill-0": {
                "state": "failed",
                "restarts": 0,
                "max_restarts": 3,
                "pid": None,
                "role": "prefill",
                "error": error,
            },
            "decode-0": ok,
            "router": {**ok, "role": "router"},
        },
        polled_at=time.time(),
    )
    env = {**os.environ, HOME_ENV: str(tmp_path)}
    cmd = [sys.executable, "-m", "sglang_engram.cluster", "status", "--name", name]
    out = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stderr  # degraded
    status = json.loads(out.stdout)
    assert status["health"] == "degraded"
    assert [(w["name"], w["state"], w.get("error")) for w in status["workers"]] == [
        ("prefill-0", "failed", error),
        ("decode-0", "running", None),
    ]
    text = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120).stdout
    assert f"cluster {name}: degraded" in text and f"prefill-0 failed: {error}" in text
