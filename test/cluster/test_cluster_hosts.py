"""The PD cluster across three hosts: network namespaces on this machine
(``engram_testing.netns_hosts``), a Ray head in host a, Ray nodes joining from b and c
(``engram_testing.ray_hosts``), ``cluster up examples/pd-cluster-hosts.yaml --address`` run
from a. The spec pins the prefill worker (Engram ``hbm``) to a and the decode workers to b
(``dram``, by label) and c (``off``, by custom resource); the router runs on a. KV moves over mooncake TCP between
the hosts' addresses.

The hosts start with no default route (a closed cluster network: SGLang's guess of a
host's address has nothing to go on). Then, in file order against the one cluster:
every worker's addresses are its node's; served tokens agree with the reference model;
the workers refuse requests without the cluster's key; host b is lost under load (every
process of it SIGKILLed at once) and service goes on through c; b comes back with a
default route (through a second network, where a guessed address would be wrong), and
so, restarted, does a's prefill worker; tokens agree again; ``down`` stops every worker on
every host. Needs root and iproute2; skipped in one line without them.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import requests
import yaml
from engram_testing.client import generate_ids
from engram_testing.netns_hosts import NetnsHosts, unavailable
from engram_testing.ray_hosts import ENV, RayHosts
from engram_testing.reference import agreement, load_reference, random_prompts
from engram_testing.soak.faults import ClusterView
from engram_testing.soak.load import LoadDriver
from sglang_engram.cluster.keys import bearer, read_key
from sglang_engram.integration.kernel_standin import gpu_present

from test.cluster.faults import BOUND_S, CONCURRENCY, workload
from test.cluster.util import EXAMPLES, alive, cluster_env, follow, start_up, wait_for, wait_ready

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(gpu_present(), reason="the CPU-engine cluster; GPUs: test_cluster_gpu"),
]
EXAMPLE = EXAMPLES / "pd-cluster-hosts.yaml"
NAME = "pd-cluster-hosts"
ROUTER_PORT, BOOTSTRAP_PORT = 8100, 8990  # the example's; each host has ports of its own
STARTUP_S = 900  # three SGLang starts at once on a loaded 2-core machine
BACK_S = 180  # the target: a lost host's workers serve again this soon after it is back
REGIMES = {"decode-b-0": "both", "decode-c-0": "prefill_only"}  # decode dram / decode off
HOST_OF = {"prefill-0": "a", "decode-b-0": "b", "decode-c-0": "c"}


@pytest.fixture(scope="module")
def hosts():
    if why := unavailable():
        pytest.skip(why)
    with NetnsHosts() as made:
        yield made


@pytest.fixture(scope="module")
def ray_hosts(hosts):
    return RayHosts(hosts).start()


@pytest.fixture(scope="module")
def cluster(hosts, ray_hosts, trained_tiny_model, tmp_path_factory):
    """`up` from host a, in the foreground, until `down` (the last test) or the end; its
    state and logs stay in pytest's temporary directory."""
    home = tmp_path_factory.mktemp("home")
    spec = hosts.scratch / f"{NAME}.yaml"
    data = yaml.safe_load(EXAMPLE.read_text())
    spec.write_text(yaml.safe_dump({**data, "model": str(trained_tiny_model)}))
    a = hosts["a"]
    up = start_up(spec, home, "--address", ray_hosts.address, host=a, env=ENV)
    lines, reader = follow(up)
    c = {"up": up, "lines": lines, "reader": reader, "spec": spec, "home": home}
    c.update(env={**cluster_env(home), **ENV}, router=f"http://{a.address}:{ROUTER_PORT}")
    c.update(view=ClusterView(NAME), reference=load_reference(trained_tiny_model))
    patch = pytest.MonkeyPatch()
    patch.setenv("SGLANG_ENGRAM_CLUSTER_HOME", str(home))  # NOTE: ClusterView reads it
    try:
        wait_ready(up, lines, STARTUP_S)
        c.update(
            key=read_key(home / NAME / "client.key"), admin=read_key(home / NAME / "admin.key")
        )
        yield c
    finally:
        patch.undo()
        if up.poll() is None:  # a test failed before `down`: `up` stops what it started
            up.terminate()
            up.wait(timeout=300)


def _cli(c: dict, host, *args: str) -> subprocess.CompletedProcess[str]:  # noqa: ANN001
    cmd = [sys.executable, "-m", "sglang_engram.cluster", *args]
    return host.run(cmd, capture_output=True, text=True, timeout=300, env=c["env"])


def _workers(c: dict) -> dict[str, dict]:
    return {w["name"]: w for w in c["view"].status()["workers"]}


def _finished(url: str) -> float:
    """The requests a worker has finished (SGLang's own counter)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(v) for v in re.findall(r"^sglang:num_requests_total\{[^}]*\} (\S+)$", text, re.M)
    )


def _bootstrap_rank_ip(prefill_host: str) -> str:
    """The address the prefill worker registered with its KV bootstrap server: where the
    decode workers reach its KV sender."""
    ranks = dict(prefill_dp_rank=0, prefill_cp_rank=0, target_tp_rank=0, target_pp_rank=0)
    url = f"http://{prefill_host}:{BOOTSTRAP_PORT}/route"
    return requests.get(url, params=ranks, timeout=10).json()["rank_ip"]


def _grown(urls: dict[str, str], before: dict[str, float]) -> list[str]:
    return [name for name, url in urls.items() if _finished(url) > before[name]]


def _tokens_agree(c: dict, n: int = 8) -> dict[str, int]:
    """``n`` fresh prompts through the router, one at a time; the decode worker that
    served each (its finished requests grew) says which regime the reference checks it
    in. Returns the requests each decode worker served."""
    decodes = {n: w["url"] for n, w in _workers(c).items() if n in REGIMES}
    served = dict.fromkeys(decodes, 0)
    for prompt in random_prompts(c["reference"], n, random.Random()):
        before = {name: _finished(url) for name, url in decodes.items()}
        out = generate_ids(c["router"], prompt, 24, c["key"])
        (by,) = wait_for(lambda b=before: _grown(decodes, b), 30, "the serving decode's count")
        got = agreement(c["reference"], prompt, out, REGIMES[by])
        assert got.all_agree, (by, prompt, out, got)
        served[by] += 1
    print(f"served {served}, every token agreeing with the reference")
    return served


def test_plan_and_status_show_each_workers_host_and_node(cluster, hosts, ray_hosts):
    c = cluster
    plan = _cli(c, hosts["a"], "plan", str(c["spec"]), "--address", ray_hosts.address, "--json")
    assert plan.returncode == 0, plan.stderr
    planned = {w["name"]: w for w in json.loads(plan.stdout)["workers"]}
    workers = _workers(c)
    for name, host in HOST_OF.items():
        w = workers[name]
        assert w["host"] == planned[name]["host"] == hosts[host].address
        assert w["node_id"] == planned[name]["node_id"] and w["state"] == "running"
    assert len({w["node_id"] for w in workers.values()}) == 3
    text = _cli(c, hosts["a"], "status", "--name", NAME).stdout
    for name, host in HOST_OF.items():
        row = re.search(rf"^{name}\s+\S+\s+running\s+0\s+(\S+)\s+(\S+)", text, re.M)
        assert row and row.groups() == (hosts[host].address, workers[name]["node_id"][:8]), text


def test_every_kv_address_is_the_workers_node(cluster, hosts):
    """Each worker binds its node's address and its KV transfer advertises it (the
    launcher passed it on); no host has a default route to guess one from."""
    c = cluster
    for host in hosts.hosts.values():
        assert [r["dst"] for r in host.routes() if r["dst"] == "default"] == []
    for name, w in _workers(c).items():
        address = hosts[HOST_OF[name]].address
        server = psutil.Process(w["pid"])
        argv = server.cmdline()
        assert server.environ()["SGLANG_HOST_IP"] == address
        assert argv[argv.index("--host") + 1] == address
        # The HTTP and the bootstrap server listen on it, not on every address.
        tree = {p.pid for p in [server, *server.children(recursive=True)]}
        listening = {
            (ip, port) for ip, port, pid in hosts[HOST_OF[name]].listening() if pid in tree
        }
        assert (address, w["port"]) in listening, listening
        if w["bootstrap_port"]:
            assert (address, w["bootstrap_port"]) in listening, listening
    # What the prefill worker registered for the decode workers to reach its KV.
    assert _bootstrap_rank_ip(hosts["a"].address) == hosts["a"].address


def test_tokens_across_hosts_on_a_closed_network(cluster):
    served = _tokens_agree(cluster)
    assert all(served.values()), served  # both decode workers, on b and on c


def test_workers_refuse_requests_without_the_key(cluster, hosts, ray_hosts):
    c = cluster
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}}
    for name, w in _workers(c).items():
        url = w["url"]
        for key in (None, "not-the-key", c["admin"]):
            r = requests.post(f"{url}/generate", json=body, headers=bearer(key), timeout=10)
            assert r.status_code == 401, (name, key is None, r.text)
        assert requests.get(f"{url}/server_info", timeout=10).status_code == 401
        assert requests.get(f"{url}/server_info", headers=bearer(c["key"]), timeout=10).ok
        # Its management endpoints take only the admin key.
        flush = f"{url}/flush_cache"
        assert requests.post(flush, headers=bearer(c["key"]), timeout=10).status_code == 401
        assert requests.post(flush, headers=bearer(c["admin"]), timeout=30).status_code == 200
        # Health and metrics need none: the supervisor's checks and the Engram gauges.
        assert requests.get(f"{url}/health", timeout=10).status_code == 200
        table = [g for g in w["engram"] if g["name"] == "sglang:engram_table_bytes"]
        assert table and w["state"] == "running", w
    router = c["router"]
    assert requests.post(f"{router}/generate", json=body, timeout=10).status_code == 401
    # What `compare` waits on (the router answers it itself), with the clients' key.
    assert requests.get(f"{router}/v1/models", headers=bearer(c["key"]), timeout=10).ok
    r = requests.post(f"{router}/generate", json=body, headers=bearer(c["admin"]), timeout=10)
    assert r.status_code == 401
    for key, status in ((None, 401), (c["key"], 401), (c["admin"], 200)):
        assert (
            requests.get(f"{router}/workers", headers=bearer(key), timeout=10).status_code == status
        )
    # The keys: files only their user reads, never in a log, a plan, a status or a command line.
    for key_file in ("client.key", "admin.key"):
        assert (c["home"] / NAME / key_file).stat().st_mode & 0o777 == 0o600
    plan = _cli(c, hosts["a"], "plan", str(c["spec"]), "--address", ray_hosts.address)
    plan_json = _cli(
        c, hosts["a"], "plan", str(c["spec"]), "--address", ray_hosts.address, "--json"
    )
    status = _cli(c, hosts["a"], "status", "--name", NAME, "--json")
    shown = [plan.stdout, plan.stderr, plan_json.stdout, status.stdout, "".join(c["lines"])]
    shown += [
        p.read_text(errors="replace")
        for p in (c["home"] / NAME).rglob("*")
        if p.is_file() and not p.name.endswith(".key")
    ]
    shown += [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])]
    for key in (c["key"], c["admin"]):
        assert not [s[:200] for s in shown if key in s]
    assert "SGLANG_HOST_IP" in plan.stdout and "--api-key" not in plan.stdout


def test_a_host_lost_and_back(cluster, hosts, ray_hosts):
    """Every process of host b SIGKILLed at once under load: each request is answered or
    refused within the bound and every answer is right; `status` names b and its worker;
    service goes on through c. b comes back (a new raylet; this time with a default
    route): its worker runs there again, unaided, within BACK_S."""
    c, view = cluster, cluster["view"]
    old = _workers(c)["decode-b-0"]
    load = LoadDriver(
        c["router"],
        workload(c["reference"].config.vocab_size),
        CONCURRENCY,
        4 * BOUND_S,
        random.randrange(1 << 30),
        c["key"],
    )
    load.start()
    try:
        wait_for(lambda: sum(o.ok for o in load.snapshot()) >= CONCURRENCY, 120, "warm-up answers")
        killed_at = time.time()
        killed = hosts["b"].kill_all()
        ray_hosts.nodes["b"].wait(timeout=30)

        def lost() -> dict | None:
            s = view.status()
            return s if s["lost_nodes"] else None

        status = wait_for(lost, 60, "status to name the lost node")
        lost_at = time.time()
        c_before = _finished(_workers(c)["decode-c-0"]["url"])
        wait_for(
            lambda: sum(o.ok and o.sent > lost_at + 1 for o in load.snapshot()) >= 3 * CONCURRENCY,
            120,
            "service through c",
        )
    finally:
        load.stop(4 * BOUND_S + 10)
    outcomes = sorted(load.snapshot(), key=lambda o: o.sent)
    # Every request answered or refused within the bound; every answer right (by one of
    # the decode workers: either regime); those sent once b was known lost all served by c.
    longest = max(o.waited_s for o in outcomes)
    hit = [o for o in outcomes if o.sent <= killed_at < o.ended]
    wrong = [
        o
        for o in outcomes
        if o.ok
        and not any(
            agreement(c["reference"], list(o.prompt), list(o.output_ids), r).all_agree
            for r in set(REGIMES.values())
        )
    ]
    after = [o for o in outcomes if o.sent > lost_at]
    causes = sorted({o.cause for o in outcomes if not o.ok})
    print(
        f"host b lost: {len(outcomes)} requests, {sum(o.ok for o in outcomes)} answered, "
        f"{len(hit)} in flight at the kill, longest wait {longest:.1f}s, causes {causes}, "
        f"named lost after {lost_at - killed_at:.1f}s, {len(wrong)} wrong"
    )
    assert status["lost_nodes"] == [
        {"host": hosts["b"].address, "node_id": old["node_id"], "workers": ["decode-b-0"]}
    ]
    assert status["health"] == "degraded" and old["pid"] in killed
    text = _cli(c, hosts["a"], "status", "--name", NAME)
    assert text.returncode == 2  # degraded
    assert f"lost node {hosts['b'].address} ({old['node_id'][:8]}): decode-b-0" in text.stdout
    assert re.search(r"^decode-b-0\s+decode\s+lost\s", text.stdout, re.M), text.stdout
    assert longest <= BOUND_S and not wrong
    assert after and all(o.ok for o in after), [o.cause for o in after if not o.ok]
    assert _finished(_workers(c)["decode-c-0"]["url"]) > c_before

    # b back, as every host is from now on: with a default route, through another network.
    for host in hosts.hosts.values():
        host.set_default_route(True)
    joined = time.monotonic()
    ray_hosts.start_node("b")

    def serving() -> dict | None:
        w = _workers(c)["decode-b-0"]
        return w if w["state"] == "running" and (w.get("router") or {}).get("registered") else None

    back = wait_for(serving, BACK_S + 120, "decode-b-0 to serve on b again")
    back_s = time.monotonic() - joined
    print(f"host b back: decode-b-0 serving {back_s:.1f}s after its raylet joined")
    assert back["host"] == hosts["b"].address and back["node_id"] != old["node_id"]
    assert back_s <= BACK_S
    wait_for(lambda: view.status()["health"] == "healthy", 60, "a healthy cluster")
    assert _tokens_agree(c)["decode-b-0"]


def test_tokens_with_a_default_route_in_every_host(cluster, hosts):
    """Every host has a default route now, through a network of its own (the uplink), and
    b's decode worker started with it; a's prefill worker starts again with it too. Each
    still binds and advertises its node's address, where SGLang's guess would take the
    uplink's, and the tokens through both decode workers agree with the reference.
    (c's decode worker, started before the route, is b's in every other respect.)"""
    c, view = cluster, cluster["view"]
    before = _workers(c)["prefill-0"]
    os.kill(before["pid"], signal.SIGKILL)

    def restarted() -> bool:
        now = _workers(c)["prefill-0"]
        return view.ready(now) and now["restarts"] > before["restarts"]

    try:
        wait_for(restarted, STARTUP_S, "a's prefill worker to start again")
    finally:
        print({n: (w["state"], w.get("restarts"), w.get("error")) for n, w in _workers(c).items()})
    guess = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('8.8.8.8', 80)); print(s.getsockname()[0])"
    for name, w in _workers(c).items():
        host = hosts[HOST_OF[name]]
        guessed = host.run(
            [sys.executable, "-c", guess], capture_output=True, text=True
        ).stdout.strip()
        assert guessed != host.address and guessed.startswith("198.18.")  # SGLang's guess: wrong
        if name != "decode-c-0":
            assert psutil.Process(w["pid"]).environ()["SGLANG_HOST_IP"] == host.address
    assert _bootstrap_rank_ip(hosts["a"].address) == hosts["a"].address
    served = _tokens_agree(c)
    assert all(served.values()), served


def test_down_stops_every_worker_on_every_host(cluster, hosts):
    c = cluster
    members = [c["view"].status()["router"], *_workers(c).values()]
    procs = []
    for m in members:
        assert m["state"] == "running", m
        p = psutil.Process(m["pid"])
        procs += [p, *p.children(recursive=True), psutil.Process(m["supervisor_pid"])]
    down = _cli(c, hosts["a"], "down", "--name", NAME)
    assert down.returncode == 0 and f"cluster {NAME} is down" in down.stdout, down.stderr
    assert c["up"].wait(timeout=120) == 0
    c["reader"].join(timeout=30)
    wait_for(lambda: not any(alive(p.pid) for p in procs), 60, "the cluster's processes to end")
    # Every host runs Ray, and nothing of the cluster.
    for host in hosts.hosts.values():
        left = [" ".join(psutil.Process(p).cmdline())[:120] for p in host.pids() if alive(p)]
        assert left and not [x for x in left if "sglang" in x], left
    assert not (c["home"] / NAME / "state.json").exists()
