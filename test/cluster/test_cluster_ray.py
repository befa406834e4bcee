"""``up`` / ``status`` / ``down`` of examples/pd-cluster-cpu.yaml on this CPU: real SGLang
workers (the prefill worker with Engram in DRAM, the decode worker with Engram on SSD,
its RAM cache seeded from a profile and its served profile written) on a real Ray cluster, KV moved
over mooncake's TCP transport, the real sglang-router in PD mode; and the cluster under
load while each kind of component fails (README "When a worker dies"): the router and
the decode worker SIGKILLed, the router SIGSTOPped, both workers at once (the prefill
worker SIGSTOPped, the decode worker SIGKILLed), the prefill worker killed again during
its start-up. ``benchmark/soak_pd.py`` strikes every kind, for minutes. Every request is answered or
refused within the bound, the supervisor restores the cluster, and every completed
answer agrees with the reference model.

One cluster is brought up for the module (each SGLang start takes ~40-60 s here) on a
Ray cluster the tests start themselves, with a bystander actor that ``down`` must leave
alone; the tests run in file order against it, and the last one takes it down.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests
import yaml
from engram_testing.client import generate_ids, settled_metrics
from engram_testing.reference import agreement, agreement_all, load_reference, random_prompts
from engram_testing.server import build_tiny_model
from engram_testing.soak.faults import ClusterView, release
from engram_testing.soak.load import send
from sglang_engram.cluster.keys import bearer, read_key
from sglang_engram.integration.kernel_standin import gpu_present

from engram.model.corpus import split_documents, stdlib_documents
from engram.profile import RowProfile
from test.cluster.faults import BOUND_S, DETECT_S, check, strike_now, under_load
from test.cluster.util import (
    EXAMPLES,
    alive,
    follow,
    spec_from_example,
    start_up,
    wait_for,
    wait_ready,
)

# NOTE: the CPU engine's cluster, for machines without a GPU (where setup.sh installs
# the pd-cpu extra); on a GPU machine test_cluster_gpu.py runs the launcher instead.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        gpu_present(), reason="the CPU-engine cluster; on a GPU see test_cluster_gpu.py"
    ),
]
STARTUP_S = 900  # two SGLang starts and the router, on a loaded 2-core machine
DECODE_RAM_CACHE_GB = 0.004  # NOTE: about half of each tiny table: the seed must choose
SEEDED = "sglang:engram_ssd_seeded_rows_total"
PLACEMENTS = {"prefill-0": "dram", "decode-0": "ssd"}


def _cli(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sglang_engram.cluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture(scope="module")
def ray_cluster():
    """A Ray cluster of this machine that claims 2 GPUs (Ray counts, nothing uses them),
    with a bystander actor in a namespace of its own."""
    import ray

    ray.init(
        num_cpus=2,
        num_gpus=2,
        include_dashboard=False,
        namespace="bystander",
        object_store_memory=100 << 20,
        log_to_driver=False,
        _system_config={"memory_monitor_refresh_ms": 0},  # as `up` starts its own
    )

    class Bystander:  # defined here: Ray ships it by value
        def pid(self) -> int:
            return os.getpid()

    bystander = ray.remote(num_cpus=0)(Bystander).options(name="other").remote()
    try:
        yield {
            "address": ray.get_runtime_context().gcs_address,
            "bystander": bystander,
            "bystander_pid": ray.get(bystander.pid.remote()),
            "cls": Bystander,
        }
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def env(tmp_path_factory, ray_cluster):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["SGLANG_ENGRAM_CLUSTER_HOME"] = str(tmp_path_factory.mktemp("home"))
    env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE", "")
    return env


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny-engram")


def test_up_names_the_workers_that_ray_has_no_gpus_for(ray_cluster, env, model, tmp_path):
    """Before the CPU cluster: the GPU example on a Ray cluster whose GPUs another job
    holds. No worker gets a GPU, so no SGLang process ever starts."""
    import ray

    spec, _ = spec_from_example("pd-cluster.yaml", tmp_path, model)
    holder = ray.remote(num_gpus=2, num_cpus=0)(ray_cluster["cls"]).remote()
    try:
        ray.get(holder.pid.remote())
        out = _cli(env, "up", str(spec), "--address", ray_cluster["address"], "--timeout", "15")
    finally:
        ray.kill(holder)
    assert out.returncode == 1, out.stdout + out.stderr
    late = re.search(r"error: Ray gave no GPUs to (\S+), (\S+) in time", out.stderr)
    assert late and {late[1], late[2]} == {"prefill-0", "decode-0"}, out.stderr
    assert "started " not in out.stdout
    wait_for(lambda: ray.available_resources().get("GPU") == 2, 60, "the GPUs to be free")


def test_up_names_the_worker_whose_port_another_process_holds(ray_cluster, env, model, tmp_path):
    """Before the CPU cluster: the decode worker's port is held by this process. `up`
    fails at once naming the worker and the port, instead of waiting for a start that
    cannot succeed (SGLang, its port taken, waits in its shutdown), and stops the rest."""
    spec, base = spec_from_example("pd-cluster-cpu.yaml", tmp_path, model)
    decode_port = base + 3  # spec_from_example: prefill-0 on base + 2, decode-0 on base + 3
    start = time.monotonic()
    with socket.socket() as held:
        held.bind(("0.0.0.0", decode_port))
        held.listen()
        out = _cli(env, "up", str(spec), "--address", ray_cluster["address"], "--timeout", "300")
    assert out.returncode == 1, out.stdout + out.stderr
    first = out.stderr.splitlines()[0]
    assert first.startswith(
        f"error: decode-0 failed to start (port {decode_port} is in use on this node, "
        f"held by pid {os.getpid()} ("
    ), out.stderr
    assert "Traceback" not in out.stderr and "stopped prefill-0 (pids " in out.stdout
    assert time.monotonic() - start < 120  # not start_timeout_s (600 s)


@pytest.fixture(scope="module")
def seed_profile(model, tmp_path_factory) -> Path:
    """``python -m engram.profile`` of held-out stdlib documents: the decode worker's seed."""
    folder = tmp_path_factory.mktemp("corpus")
    docs = [d for d in split_documents(stdlib_documents(), "heldout") if len(d.text) > 2000]
    for i, doc in enumerate(docs[:40]):
        (folder / f"doc{i}.txt").write_text(doc.text)
    out = tmp_path_factory.mktemp("profile") / "stdlib.npz"
    done = subprocess.run(
        [sys.executable, "-m", "engram.profile", str(model), str(folder), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def cluster(ray_cluster, env, model, seed_profile, tmp_path_factory):
    """`up` of the CPU example (its own ports) on the tests' Ray cluster, as a user runs
    it: in the foreground, until `down` (the last test) or the end of the module."""
    example = yaml.safe_load((EXAMPLES / "pd-cluster-cpu.yaml").read_text())
    # NOTE: a decode worker with Engram (the example's is off): restarted, it must seed
    # its Engram history again, and its RAM cache from the profile. The example's hang
    # and start timeouts; restarts in a row enough for the prefill worker's three
    # (stopped, killed, killed while starting).
    restart = {**example["restart"], "max_restarts": 4, "backoff_s": 1, "max_backoff_s": 2}
    served = tmp_path_factory.mktemp("served") / "decode.npz"
    decode_ssd = {
        "engram_offload": "ssd",
        "engram_ssd_dir": str(tmp_path_factory.mktemp("ssd")),
        "engram_ram_cache_gb": DECODE_RAM_CACHE_GB,
        "engram_seed_profile": str(seed_profile),
        "engram_profile_out": str(served),
    }
    workers = [
        {**g, **(decode_ssd if g["role"] == "decode" else {"engram_offload": "dram"})}
        for g in example["workers"]
    ]
    spec, base = spec_from_example(
        "pd-cluster-cpu.yaml",
        tmp_path_factory.mktemp("spec"),
        model,
        restart=restart,
        workers=workers,
    )
    name = yaml.safe_load(spec.read_text())["name"]
    up = start_up(
        spec, Path(env["SGLANG_ENGRAM_CLUSTER_HOME"]), "--address", ray_cluster["address"], env=env
    )
    lines, reader = follow(up)
    c = {"name": name, "spec": spec, "env": env, "up": up, "lines": lines, "reader": reader}
    c.update(router=f"http://127.0.0.1:{base}", home=Path(env["SGLANG_ENGRAM_CLUSTER_HOME"]))
    c.update(seed_profile=seed_profile, served_profile=served)
    c["reference"] = load_reference(model)
    c["view"] = ClusterView(name)
    patch = pytest.MonkeyPatch()
    # NOTE: the soak's ClusterView reads the state file from this process's environment.
    patch.setenv("SGLANG_ENGRAM_CLUSTER_HOME", env["SGLANG_ENGRAM_CLUSTER_HOME"])
    try:
        wait_ready(up, lines, STARTUP_S)
        keys = c["home"] / name
        c.update(key=read_key(keys / "client.key"), admin_key=read_key(keys / "admin.key"))
        yield c
    finally:
        patch.undo()
        if up.poll() is None:  # a test failed before `down`: `up` stops what it started
            release(c.get("faults", []))  # nothing a failed test froze stays frozen
            up.terminate()
            up.wait(timeout=300)


def _status(c: dict) -> dict:
    out = _cli(c["env"], "status", "--name", c["name"], "--json", timeout=120)
    assert out.returncode in (0, 2), out.stderr
    return json.loads(out.stdout)


def _trees(status: dict) -> list[psutil.Process]:
    """Every process of the cluster's servers (SGLang's schedulers included) and their
    supervising actors."""
    procs = []
    for m in [status["router"], *status["workers"]]:
        assert m["pid"] and m["supervisor_pid"], m  # each member runs
        for pid in (m["pid"], m["supervisor_pid"]):
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
    return procs


def test_status_shows_the_cpu_workers_ready_with_their_engram_gauges(cluster, ray_cluster):
    c = cluster
    again = _cli(c["env"], "up", str(c["spec"]), "--address", ray_cluster["address"])
    assert again.returncode == 1 and f"cluster '{c['name']}' is already up" in again.stderr

    status = _status(c)
    assert status["health"] == "healthy" and not status["local_ray"], json.dumps(status)
    for w in status["workers"]:
        placement = PLACEMENTS[w["name"]]
        assert (w["state"], w["engram_offload"], w["gpu_ids"]) == ("running", placement, [])
        assert w["router"]["registered"] and w["restarts"] == 0
        # The SGLang process runs on SGLang's CPU engine, as the spec's device says, with
        # the spec's PD timeouts.
        server = psutil.Process(w["pid"])
        assert server.environ().get("SGLANG_USE_CPU_ENGINE") == "1"
        assert server.environ().get("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT") == "30"
        argv = server.cmdline()
        assert argv[argv.index("--device") + 1] == "cpu"
        assert argv[argv.index("--engram-offload") + 1] == placement
        # Each worker's Engram tables live where its group's spec says.
        table = {
            g["labels"]["tier"]: g["value"]
            for g in w["engram"]
            if g["name"] == "sglang:engram_table_bytes"
        }
        assert table.get(placement, 0) > 0, w["engram"]
    # The decode worker seeded its RAM cache from the spec's profile.
    decode = status["workers"][1]
    argv = psutil.Process(decode["pid"]).cmdline()
    assert argv[argv.index("--engram-seed-profile") + 1] == str(c["seed_profile"])
    assert _seeded_rows(decode["url"]) > 0
    text = _cli(c["env"], "status", "--name", c["name"], timeout=120).stdout
    assert f"cluster {c['name']}: healthy" in text
    assert re.search(r"dram: .*table_bytes\{tier=dram\}=\d", text), text
    assert re.search(r"ssd: .*table_bytes\{tier=ssd\}=\d", text), text
    assert "started prefill-0 at http://" in "".join(c["lines"]) and "(CPU)" in "".join(c["lines"])


def _agreement(c: dict, n: int, max_new_tokens: int = 24):
    """Greedy tokens of ``n`` fresh random prompts through the router (4 at a time),
    checked against the reference model teacher-forced in two regimes."""
    reference = c["reference"]
    prompts = random_prompts(reference, n, random.Random())
    served: dict[int, list[int]] = {}

    def send(i: int) -> None:
        served[i] = generate_ids(c["router"], prompts[i], max_new_tokens, c["key"])

    for start in range(0, n, 4):
        threads = [
            threading.Thread(target=send, args=(i,)) for i in range(start, min(n, start + 4))
        ]
        [t.start() for t in threads]
        [t.join() for t in threads]
    assert sorted(served) == list(range(n)), "a request through the router failed"
    return {
        regime: agreement_all(reference, prompts[:n], [served[i] for i in range(n)], regime)
        for regime in ("both", "prefill_only")
    }


def test_requests_through_the_router_agree_with_the_full_model(cluster):
    got = _agreement(cluster, 8)
    print(f"agreement through the router: {got}")
    # Engram at the prompt's positions (prefill) and at every new token (decode, from
    # its seeded ssd tables, its history seeded from the prompt) ...
    assert got["both"].all_agree, got["both"]
    # ... which is not prefill_only: Engram in decode gives other tokens.
    assert got["prefill_only"].within_tie < got["prefill_only"].total, got["prefill_only"]
    # The decode worker writes the profile of the rows it served (2 s after the lookups
    # settle), of the served model's hash: a profile the next start can seed from.
    path = cluster["served_profile"]
    wait_for(lambda: path.is_file(), 60, "the decode worker's served profile")
    served = RowProfile.load(path)
    assert served.identity == RowProfile.load(cluster["seed_profile"]).identity
    assert served.corpus["served_rows"] > 0 and all(r.size for r in served.rows.values())


def _send_long(router: str, key: str, results: list, i: int) -> None:
    body = {
        "input_ids": [random.randrange(8, 2000) for _ in range(random.randint(8, 32))],
        # NOTE: far more tokens than are generated before the kill.
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 3000, "ignore_eos": True},
    }
    start = time.monotonic()
    try:
        r = requests.post(f"{router}/generate", json=body, headers=bearer(key), timeout=300)
        results[i] = (r.status_code, r.text[:300], time.monotonic() - start)
    except requests.RequestException as exc:
        results[i] = ("error", str(exc)[:300], time.monotonic() - start)


def test_a_decode_worker_killed_mid_run_is_restarted_and_serves_again(cluster):
    c = cluster
    before = _status(c)
    decode = before["workers"][1]
    old_id = decode["router"]["worker_id"]
    server = psutil.Process(decode["pid"])
    old_tree = [server, *server.children(recursive=True)]

    results: list = [None] * 4
    threads = [
        threading.Thread(target=_send_long, args=(c["router"], c["key"], results, i))
        for i in range(4)
    ]
    [t.start() for t in threads]
    wait_for(lambda: _running_requests(decode["url"]) >= 4, 300, "the requests to be decoding")
    server.kill()
    for t in threads:
        t.join(timeout=120)  # NOTE: generous: the router answers at once
    assert not any(t.is_alive() for t in threads), f"an in-flight request hung: {results}"
    print(f"in-flight requests when decode-0 was killed: {results}")
    for status, text, waited in results:
        # A clear error, naming the decode side, at once instead of a hang or a wrong answer.
        assert status == "error" or status >= 500, (status, text)
        assert "decode" in text.lower() and waited < BOUND_S, text
    wait_for(lambda: not any(alive(p.pid) for p in old_tree), 60, "the killed tree to end")

    def recovered():
        s = _status(c)
        d = s["workers"][1]
        ok = d["restarts"] == 1 and d["state"] == "running" and d["router"]["registered"]
        return s if ok and s["health"] == "healthy" else None

    status = wait_for(recovered, STARTUP_S, "the decode worker's restart")
    decode = status["workers"][1]
    assert decode["pid"] != server.pid and decode["exit_codes"] == [-signal.SIGKILL]
    assert decode["router"]["removals"] == 1 and decode["router"]["reregistrations"] == 1
    assert decode["router"]["worker_id"] != old_id
    answer = requests.get(f"{c['router']}/workers", headers=bearer(c["admin_key"]), timeout=30)
    listed = {w["url"]: w for w in answer.json()["workers"]}
    assert listed[decode["url"]]["worker_type"] == "decode"
    assert status["workers"][0]["restarts"] == 0  # the prefill worker went on running
    assert _seeded_rows(decode["url"]) > 0  # seeded from the profile again
    # The restarted decode worker seeds each request's Engram history again.
    got = _agreement(c, 4)
    print(f"agreement after the restart: {got}")
    assert got["both"].all_agree, got["both"]


def _seeded_rows(url: str) -> float:
    """The rows the worker's seeding put in its RAM caches, once the count settled."""
    return settled_metrics(url, wants={SEEDED: 1}, timeout_s=120).get(SEEDED, 0.0)


def _running_requests(url: str) -> float:
    try:
        text = requests.get(f"{url}/metrics", timeout=10).text
    except requests.RequestException:
        return 0
    found = re.findall(r"^sglang:num_running_reqs\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    return sum(float(v) for v in found)


def _faulted(c: dict, act, detect_s: float) -> str:  # noqa: ANN001
    """``act`` under load; every request checked (``faults.check``); a line of figures."""

    def strike_all(view):  # noqa: ANN001
        faults = act(view)
        c.setdefault("faults", []).extend(faults)
        return faults

    vocab = c["reference"].config.vocab_size
    run = under_load(c["router"], c["view"], vocab, strike_all, STARTUP_S, c["key"])
    figures = check(run, c["reference"], "both", detect_s=detect_s)
    print(figures)
    return figures


def test_the_router_killed_and_then_stopped_is_restarted_each_time(cluster):
    c = cluster
    before = c["view"].members()["router"]
    _faulted(c, lambda view: [strike_now(view, "router:kill")], detect_s=0)
    # A stopped router is silent, not gone: it is SIGKILLed once hang_timeout_s has passed.
    _faulted(c, lambda view: [strike_now(view, "router:stop")], detect_s=DETECT_S)
    router = c["view"].members()["router"]
    assert router["restarts"] == before["restarts"] + 2 and router["hung_kills"] == 1
    assert router["exit_codes"][-2:] == [-signal.SIGKILL, -signal.SIGKILL]
    assert c["view"].status()["health"] == "healthy"


def test_both_workers_at_once_one_again_while_it_starts_then_prefix_cache_hits(cluster):
    c = cluster

    def act(view):  # noqa: ANN001
        # The prefill worker hangs (SIGKILLed by the supervisor after hang_timeout_s) and
        # the decode worker dies, together.
        faults = [strike_now(view, "prefill:stop"), strike_now(view, "decode:kill")]
        stopped = faults[0].members["prefill-0"]

        def restarting() -> int | None:
            m = view.members()["prefill-0"]
            return (
                m["pid"] if m["state"] == "starting" and m["pid"] not in (None, stopped) else None
            )

        # The prefill worker, restarted, is killed again while it starts: once more.
        os.kill(wait_for(restarting, 120, "the prefill worker's restart"), signal.SIGKILL)
        return faults

    _faulted(c, act, detect_s=DETECT_S)
    prefill, decode = (c["view"].members()[n] for n in ("prefill-0", "decode-0"))
    assert prefill["hung_kills"] == 1 and prefill["exit_codes"] == [-signal.SIGKILL] * 2
    assert decode["exit_codes"][-1] == -signal.SIGKILL and decode["hung_kills"] == 0
    assert c["view"].status()["health"] == "healthy"
    # The restarted prefill worker's prefix cache: a prompt, then the same prompt; the
    # second reuses the first's KV, and both answers are right.
    prompt = [t for p in random_prompts(c["reference"], 2, random.Random()) for t in p]
    outcomes = [send(c["router"], prompt, 16, 60, c["key"]) for _ in range(2)]
    assert all(o.ok for o in outcomes), outcomes
    # the radix cache held the whole prompt but its last token
    assert outcomes[1].cached_tokens == len(prompt) - 1 > outcomes[0].cached_tokens, outcomes
    for o in outcomes:
        assert agreement(c["reference"], prompt, list(o.output_ids), "both").all_agree


def test_down_stops_every_process_and_leaves_ray_alone(cluster, ray_cluster):
    import ray

    c = cluster
    status = _status(c)
    procs = _trees(status)
    assert len(procs) > 6  # SGLang's schedulers and detokenizers are in there
    down = _cli(c["env"], "down", "--name", c["name"])
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"cluster {c['name']} is down" in down.stdout
    assert c["up"].wait(timeout=120) == 0
    c["reader"].join(timeout=30)
    out = "".join(c["lines"])
    for name in ("router", "prefill-0", "decode-0"):
        assert f"stopped {name} (pids " in out
    wait_for(lambda: not any(alive(p.pid) for p in procs), 60, "the cluster's processes to end")
    # Nothing else of it anywhere: no process serves its ports or its model.
    ports = {str(m["port"]) for m in status["workers"]} | {c["router"].rsplit(":", 1)[1]}
    model = yaml.safe_load(c["spec"].read_text())["model"]
    left = []
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        if model in argv or any(a in ports for a in argv):
            left.append((p.pid, " ".join(argv)[:200]))
    assert left == []
    assert not (c["home"] / c["name"] / "state.json").exists()
    assert ray.get(ray_cluster["bystander"].pid.remote()) == ray_cluster["bystander_pid"]
    out = _cli(c["env"], "status", "--name", c["name"], timeout=120)
    assert out.returncode == 1 and f"no cluster named '{c['name']}'" in out.stderr
