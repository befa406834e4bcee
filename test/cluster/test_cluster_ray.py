"""up / status / down on a real local Ray cluster, with the real sglang-router in PD mode.

Ray is told the node has 2 GPUs; each worker command is replaced by the GPU stand-in
(gpu_standin_server.py), the only stand-in: SGLang cannot serve without a GPU.
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import string
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from test.cluster.util import alive, free_block, wait_for

STANDIN = Path(__file__).with_name("gpu_standin_server.py")
pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path):
    """A spec for 1 prefill (hbm) + 1 decode (off) worker on free ports, and the env."""
    name = "t" + "".join(random.choices(string.ascii_lowercase, k=6))
    base = free_block(5)
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(
        f"""name: {name}
model: {tmp_path}/model
transfer_backend: fake
router: {{port: {base}, prometheus_port: {base + 1}}}
base_port: {base + 2}
bootstrap_base_port: {base + 4}
restart: {{max_restarts: 2, backoff_s: 0.5}}
workers:
  - {{role: prefill, engram_offload: hbm}}
  - {{role: decode, engram_offload: off}}
"""
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["SGLANG_ENGRAM_CLUSTER_HOME"] = str(tmp_path / "home")
    env["SGLANG_ENGRAM_CLUSTER_WORKER_CMD"] = f"{sys.executable} {STANDIN}"
    return {
        "name": name,
        "spec": str(spec),
        "env": env,
        "home": tmp_path / "home",
        "router": f"http://127.0.0.1:{base}",
        "prefill_port": base + 2,
        "decode_port": base + 3,
        "bootstrap_port": base + 4,
    }


def _cli(c: dict, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sglang_engram.cluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=c["env"],
    )


def _status(c: dict) -> dict:
    out = _cli(c, "status", "--name", c["name"], "--json", timeout=60)
    assert out.returncode in (0, 2), out.stderr
    return json.loads(out.stdout)


def _http(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _generate_through_router(c: dict) -> None:
    """A request split by the router: prefill keeps the prompt, decode fetches it."""
    prompt = "".join(random.choices(string.ascii_letters + " ", k=random.randint(8, 40)))
    budget = random.randint(1, len(prompt))
    out = _http(
        f"{c['router']}/generate", {"text": prompt, "sampling_params": {"max_new_tokens": budget}}
    )
    assert out["text"] == prompt[::-1][:budget]
    assert out["meta_info"]["prefill_port"] == c["prefill_port"]
    assert out["meta_info"]["decode_port"] == c["decode_port"]


def _start_up(c: dict, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    """`up` in the foreground, as a user runs it; returns it once it says ready."""
    up = subprocess.Popen(
        [sys.executable, "-m", "sglang_engram.cluster", "up", c["spec"], *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=c["env"],
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in up.stdout], daemon=True).start()
    seen: list[str] = []

    def ready() -> bool:
        while not lines.empty():
            seen.append(lines.get())
        assert up.poll() is None, "".join(seen)
        return any(x.startswith("ready: ") for x in seen)

    try:
        wait_for(ready, 240, "up to report ready")
    except BaseException:
        up.kill()
        raise
    c["lines"] = lines
    return up, seen


def _rest(c: dict, seen: list[str]) -> str:
    time.sleep(0.5)
    while not c["lines"].empty():
        seen.append(c["lines"].get())
    return "".join(seen)


def test_up_on_a_ray_cluster_status_restart_and_down(cluster):
    import ray

    c = cluster
    ray.init(
        num_cpus=2,
        num_gpus=2,
        include_dashboard=False,
        namespace="bystander",
        object_store_memory=100 << 20,
        log_to_driver=False,
    )
    up = None
    try:
        # Something else on the same Ray cluster, which `down` must leave alone.
        class Bystander:  # defined here: Ray ships it by value
            def pid(self) -> int:
                return os.getpid()

        bystander = ray.remote(num_cpus=0)(Bystander).options(name="other").remote()
        bystander_pid = ray.get(bystander.pid.remote())
        c["env"]["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "")
        address = ray.get_runtime_context().gcs_address

        # A worker command that cannot be spawned fails at once (not after --timeout),
        # with the reason; everything started is stopped.
        broken = {**c, "env": {**c["env"], "SGLANG_ENGRAM_CLUSTER_WORKER_CMD": "/nonexistent/srv"}}
        out = _cli(broken, "up", c["spec"], "--address", address, "--timeout", "1800")
        assert out.returncode == 1
        assert (
            "error: prefill-0 failed to start (cannot start: [Errno 2] No such file" in out.stderr
        )
        assert not (c["home"] / c["name"] / "state.json").exists()
        wait_for(lambda: ray.available_resources().get("GPU") == 2, 30, "the GPUs to be free")

        # Another job holds one of the two GPUs: exactly the worker left without one is
        # named, once the timeout has passed.
        holder = ray.remote(num_gpus=1, num_cpus=0)(Bystander).remote()
        ray.get(holder.pid.remote())
        out = _cli(c, "up", c["spec"], "--address", address, "--timeout", "20")
        assert out.returncode == 1
        late = re.search(r"error: Ray gave no GPUs to (\S+) in time", out.stderr)
        assert late and late[1] in ("prefill-0", "decode-0"), out.stderr
        started = {m for m in ("prefill-0", "decode-0") if f"started {m} at" in out.stdout}
        assert started == set() and f"stopped {late[1]}" not in out.stdout
        ray.kill(holder)
        wait_for(lambda: ray.available_resources().get("GPU") == 2, 30, "the GPUs to be free")

        # plan against the Ray cluster: its node, nothing started.
        plan = _cli(c, "plan", c["spec"], "--address", address, "--json", timeout=60)
        assert plan.returncode == 0, plan.stderr
        planned = {w["name"]: w for w in json.loads(plan.stdout)["workers"]}
        assert [w["gpus"] for w in planned.values()] == [1, 1]
        assert ray.util.list_named_actors(all_namespaces=True) == [
            {"name": "other", "namespace": "bystander"}
        ]

        up, seen = _start_up(c, "--address", address)
        again = _cli(c, "up", c["spec"], "--address", address)
        assert again.returncode == 1 and f"cluster '{c['name']}' is already up" in again.stderr

        status = _status(c)
        assert status["health"] == "healthy" and status["up_pid"] == up.pid, json.dumps(status)
        prefill, decode = status["workers"]
        assert [prefill["state"], decode["state"]] == ["running", "running"]
        assert sorted(prefill["gpu_ids"] + decode["gpu_ids"]) == ["0", "1"]
        assert [prefill["url"], decode["url"]] == [w["url"] for w in planned.values()]
        assert prefill["router"]["registered"] and decode["router"]["registered"]
        assert prefill["engram"] == [
            {"name": "sglang:engram_table_bytes", "labels": {"tier": "hbm"}, "value": 1048576.0}
        ]
        assert decode["engram"] == []
        text = _cli(c, "status", "--name", c["name"], timeout=60).stdout
        assert "cluster " + c["name"] + ": healthy" in text
        assert "hbm: table_bytes{tier=hbm}=1.0MiB" in text and "off: no engram metrics" in text
        _generate_through_router(c)

        # Kill the decode worker's process: it is restarted and registered anew.
        old_id = decode["router"]["worker_id"]
        os.kill(decode["pid"], signal.SIGKILL)

        def recovered():
            s = _status(c)
            d = s["workers"][1]
            ok = d["restarts"] == 1 and d["state"] == "running" and d["router"]["registered"]
            ok = ok and d["router"]["reregistrations"] == 1
            return s if ok and s["health"] == "healthy" else None

        status = wait_for(recovered, 60, "the decode worker's restart")
        decode = status["workers"][1]
        assert decode["pid"] != prefill["pid"] and decode["exit_codes"] == [-signal.SIGKILL]
        assert decode["router"]["removals"] == 1 and decode["router"]["reregistrations"] == 1
        assert decode["router"]["worker_id"] != old_id
        listed = {w["url"]: w for w in _http(f"{c['router']}/workers")["workers"]}
        assert listed[decode["url"]]["id"] == decode["router"]["worker_id"]
        assert listed[decode["url"]]["worker_type"] == "decode"
        assert listed[prefill["url"]]["bootstrap_port"] == c["bootstrap_port"]
        _generate_through_router(c)

        members = [status["router"], *status["workers"]]
        pids = [m["pid"] for m in members] + [m["supervisor_pid"] for m in members]
        assert all(alive(p) for p in pids)
        down = _cli(c, "down", "--name", c["name"])
        assert down.returncode == 0, down.stdout + down.stderr
        assert f"cluster {c['name']} is down" in down.stdout
        assert up.wait(timeout=30) == 0
        out = _rest(c, seen)
        for name in ("router", "prefill-0", "decode-0"):
            assert f"stopped {name} (pids " in out
        wait_for(lambda: not any(alive(p) for p in pids), 30, "the cluster's processes to end")
        assert not (c["home"] / c["name"] / "state.json").exists()
        assert ray.get(bystander.pid.remote()) == bystander_pid  # untouched
        # Ray itself is still up, and every GPU was handed back.
        wait_for(lambda: ray.available_resources().get("GPU") == 2, 30, "the GPUs to be free")
        out = _cli(c, "status", "--name", c["name"], timeout=60)
        assert out.returncode == 1 and f"no cluster named '{c['name']}'" in out.stderr
    finally:
        if up is not None and up.poll() is None:
            up.terminate()  # the test failed half-way: `up` stops what it started
            up.wait(timeout=120)
        ray.shutdown()


def test_up_with_its_own_ray_stops_everything_on_ctrl_c(cluster):
    c = cluster
    up, seen = _start_up(c, "--num-gpus", "2")
    try:
        assert any("waiting for" in x or ": running" in x for x in seen)  # progress shown
        tree = psutil.Process(up.pid).children(recursive=True)
        status = _status(c)  # from another process, through the state file
        assert status["health"] == "healthy" and status["local_ray"]
        members = [status["router"], *status["workers"]]
        assert {m["pid"] for m in members} <= {p.pid for p in tree}
        _generate_through_router(c)

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=120) == 0
    finally:
        if up.poll() is None:
            up.kill()
    out = _rest(c, seen)
    for name in ("router", "prefill-0", "decode-0"):
        assert f"stopped {name} (pids " in out
    wait_for(lambda: not any(alive(p.pid) for p in tree), 30, "every process of up to end")
    assert not (c["home"] / c["name"] / "state.json").exists()


def test_a_killed_up_takes_its_cluster_with_it(cluster):
    c = cluster
    up, _ = _start_up(c, "--num-gpus", "2")
    try:
        members = [(m := _status(c))["router"], *m["workers"]]
        pids = [m["pid"] for m in members]
        up.kill()  # SIGKILL: no teardown runs
        up.wait(timeout=30)
    finally:
        if up.poll() is None:
            up.kill()
    wait_for(lambda: not any(alive(p) for p in pids), 60, "the cluster's processes to end")
    out = _cli(c, "status", "--name", c["name"], timeout=60)
    assert out.returncode == 1 and "is gone" in out.stdout
    assert not (c["home"] / c["name"] / "state.json").exists()
