"""`plan`: resolved commands, hosts, GPUs and ports, as text and JSON; placement rules."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_engram.cluster.assignment import Demand, Node, assign_nodes
from sglang_engram.cluster.node_loss import lost_workers, places
from sglang_engram.cluster.plan import CPU_KV_TOKENS, build_plan
from sglang_engram.cluster.ports import ephemeral_range
from sglang_engram.cluster.spec import ClusterSpecError, parse_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pd-cluster.yaml"
CPU_EXAMPLE = EXAMPLE.with_name("pd-cluster-cpu.yaml")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sglang_engram.cluster", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_plan_json_on_the_example(tmp_path):
    out = _cli("plan", str(EXAMPLE), "--json", "--num-gpus", "2", "--log-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    prefill, decode = plan["workers"]
    assert (prefill["role"], decode["role"]) == ("prefill", "decode")
    assert (prefill["port"], prefill["bootstrap_port"]) == (30000, 8998)
    assert (decode["port"], decode["bootstrap_port"]) == (30001, None)
    assert prefill["gpus"] == decode["gpus"] == 1 and "gpu_ids" not in prefill
    assert prefill["url"] == f"http://{prefill['host']}:30000"
    assert prefill["host"] == decode["host"] == plan["router"]["host"]
    p, d = prefill["command"], decode["command"]
    assert p[1:3] == ["-m", "sglang.launch_server"]
    assert _after(p, "--disaggregation-mode") == "prefill"
    assert _after(d, "--disaggregation-mode") == "decode"
    assert _after(p, "--disaggregation-transfer-backend") == "mooncake"
    assert _after(p, "--disaggregation-bootstrap-port") == "8998"
    assert "--disaggregation-bootstrap-port" not in d
    assert (_after(p, "--engram-offload"), _after(d, "--engram-offload")) == ("hbm", "off")
    # NOTE: a relative model path that exists where plan runs is made absolute
    model = Path("models/tiny-engram")
    want = str(model.resolve()) if model.exists() else str(model)
    assert _after(p, "--port") == "30000" and _after(p, "--model-path") == want
    assert prefill["log"] == str(tmp_path / "prefill-0.log")
    assert plan["router"]["url"] == f"http://{plan['router']['host']}:8000"
    r = plan["router"]["command"]
    # sglang_router.launch_router's arguments, started by our launcher (test_commands
    # parses them with the router's own parser).
    assert r[1:3] == ["-m", "sglang_engram.cluster.router_main"] and "--pd-disaggregation" in r
    i = r.index("--prefill")
    assert r[i + 1 : i + 3] == [prefill["url"], "8998"]
    assert _after(r, "--decode") == decode["url"]
    assert _after(r, "--port") == str(plan["router"]["port"]) == "8000"
    # The spec's timeouts: SGLang's in every worker's environment, the router's as flags;
    # and the node's address, which the worker binds and its KV transfer advertises.
    for w in (prefill, decode):
        assert w["env"] == {
            "SGLANG_HOST_IP": w["host"],
            "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "30",
            "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "60",
            "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": "2",
            "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "2",
        }
        assert _after(w["command"], "--host") == w["host"]
    assert _after(r, "--health-check-interval-secs") == "10" and "--disable-circuit-breaker" in r


def test_plan_text_lists_every_process(tmp_path):
    out = _cli("plan", str(EXAMPLE), "--num-gpus", "2", "--log-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.strip()}
    # NAME ROLE HOST NODE GPUS PORT BOOTSTRAP ENGRAM; planned without Ray: no node id
    assert rows["prefill-0"][1:2] + rows["prefill-0"][3:8] == [
        "prefill",
        "-",
        "1",
        "30000",
        "8998",
        "hbm",
    ]
    assert rows["decode-0"][1:2] + rows["decode-0"][3:8] == [
        "decode",
        "-",
        "1",
        "30001",
        "-",
        "off",
    ]
    assert rows["router"][5] == "8000"
    assert "prefill-0:" in out.stdout and "--disaggregation-mode prefill" in out.stdout
    assert "router: " in out.stdout and "--pd-disaggregation" in out.stdout


def test_cpu_plan_gives_workers_no_gpus_and_the_cpu_engine(tmp_path):
    out = _cli("plan", str(CPU_EXAMPLE), "--json", "--log-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["device"] == "cpu" and plan["transfer_backend"] == "mooncake_tcp"
    prefill, decode = plan["workers"]
    for w in (prefill, decode):
        assert w["gpus"] == 0 and w["env"]["SGLANG_USE_CPU_ENGINE"] == "1"
        assert _after(w["command"], "--device") == "cpu"
        assert _after(w["command"], "--max-total-tokens") == str(CPU_KV_TOKENS)
        assert "--sleep-on-idle" in w["command"]  # an idle CPU scheduler spins a core
    assert _after(prefill["command"], "--engram-offload") == "dram"
    assert _after(decode["command"], "--engram-offload") == "off"
    assert plan["router"]["env"] == {} and plan["router"]["port"] == 8100
    text = _cli("plan", str(CPU_EXAMPLE), "--log-dir", str(tmp_path)).stdout
    assert "device cpu, transfer backend mooncake_tcp" in text
    assert "  prefill-0: SGLANG_USE_CPU_ENGINE=1 " in text and " --device cpu " in text
    # --num-gpus means nothing for a CPU spec: said so, not ignored.
    out = _cli("plan", str(CPU_EXAMPLE), "--num-gpus", "2")
    assert out.returncode == 2 and out.stderr == (
        "error: --num-gpus is for device gpu; a device cpu spec uses no GPUs\n"
    )


def test_cpu_workers_take_their_kv_pool_from_extra_args_and_go_round_the_nodes():
    spec = parse_spec(
        {
            "model": "/m",
            "device": "cpu",
            "transfer_backend": "mooncake_tcp",
            "workers": [
                {"role": "prefill", "count": 2, "extra_args": ["--max-total-tokens=4096"]},
                {"role": "decode", "extra_args": ["--max-total-tokens", "2048"]},
            ],
        }
    )
    nodes = [Node("10.0.0.1", 0, "n1"), Node("10.0.0.2", 0, "n2")]
    plan = build_plan(spec, nodes, router_host="10.0.0.9", log_dir="/logs")
    assert [w.host for w in plan.workers] == ["10.0.0.1", "10.0.0.2", "10.0.0.1"]
    for w in plan.workers:  # the spec's pool size, once; not the default's
        pools = [a for a in w.command if a.startswith("--max-total-tokens")]
        assert len(pools) == 1 and str(CPU_KV_TOKENS) not in w.command and w.gpus == 0
    assert plan.workers[2].command[-2:] == ("--max-total-tokens", "2048")


def test_plan_reports_bad_specs_and_missing_gpus(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        EXAMPLE.read_text().replace(
            "tp_size: 1\n    gpus_per_worker: 1", "tp_size: 2\n    gpus_per_worker: 1", 1
        )
    )
    out = _cli("plan", str(bad), "--num-gpus", "8")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        f"error: {bad}: workers[0]: gpus_per_worker 1 is less than tp_size 2; a TP-2 "
        "server needs at least 2 GPUs"
    )
    out = _cli("plan", str(EXAMPLE), "--num-gpus", "1")
    assert out.returncode == 2
    assert "the spec needs 2 GPUs in all, but the cluster has 1" in out.stderr
    out = _cli("plan", str(EXAMPLE), env={"CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 2
    assert "this host has no GPU that Ray would see; pass --num-gpus N" in out.stderr


def test_warnings_show_in_the_plan(tmp_path):
    spec = tmp_path / "warn.yaml"
    spec.write_text(EXAMPLE.read_text().replace("engram_offload: hbm", "engram_offload: off"))
    out = _cli("plan", str(spec), "--num-gpus", "2")
    assert out.returncode == 0
    assert "warning: workers[0]: engram_offload off on a prefill worker" in out.stdout


def test_a_worker_larger_than_any_node_is_refused():
    nodes = [Node("10.0.0.1", 4), Node("10.0.0.2", 4)]
    with pytest.raises(
        ClusterSpecError, match="worker p-0 needs 8 GPUs on one node, but the largest node has 4"
    ):
        assign_nodes([Demand("p-0", 8)], nodes)


def test_ports_and_hosts_across_nodes():
    spec = parse_spec(
        {
            "model": "/m",
            "transfer_backend": "nixl",
            "base_port": 40000,
            "bootstrap_base_port": 9000,
            "workers": [
                {"role": "prefill", "count": 3, "tp_size": 2},
                {"role": "decode", "count": 2, "tp_size": 4},
            ],
        }
    )
    nodes = [Node("10.0.0.1", 8, "n1"), Node("10.0.0.2", 8, "n2")]
    plan = build_plan(spec, nodes, router_host="10.0.0.9", log_dir="/logs")
    assert [w.port for w in plan.workers] == [40000, 40001, 40002, 40003, 40004]
    assert [w.bootstrap_port for w in plan.workers] == [9000, 9001, 9002, None, None]
    # Largest first: both TP-4 decode workers fill node 1; the three TP-2 prefills node 2.
    assert [w.host for w in plan.workers] == ["10.0.0.2"] * 3 + ["10.0.0.1"] * 2
    assert [w.node_id for w in plan.workers] == ["n2"] * 3 + ["n1"] * 2
    r = list(plan.router.command)
    assert [r[i + 1] for i, a in enumerate(r) if a == "--prefill"] == [
        w.url for w in plan.workers[:3]
    ]
    assert plan.router.url == "http://10.0.0.9:8000"


def test_ports_in_the_ephemeral_range_are_warned_about(tmp_path):
    span = ephemeral_range()
    if span is None or span.start <= 30002:
        pytest.skip(f"the ephemeral port range {span} holds the spec's default ports")
    base = random.randrange(span.start, span.stop - 10)
    raw = {"model": "/m", "transfer_backend": "fake", "base_port": base, "device": "cpu"}
    raw["workers"] = [{"role": "prefill"}, {"role": "decode"}]
    plan = build_plan(parse_spec(raw), [Node("10.0.0.1", 0)], router_host="10.0.0.1")
    want = (
        f"prefill-0 port {base}, decode-0 port {base + 1} lie in this machine's ephemeral "
        f"port range {span.start}-{span.stop - 1}"
    )
    assert [w for w in plan.warnings if w.startswith(want)], plan.warnings
    assert plan.warnings == plan.to_dict()["warnings"] and f"warning: {want}" in plan.render()
    # The defaults lie below it.
    del raw["base_port"]
    plan = build_plan(parse_spec(raw), [Node("10.0.0.1", 0)], router_host="10.0.0.1")
    assert not [w for w in plan.warnings if "ephemeral" in w], plan.warnings


def test_shared_gpus_are_packed_as_ray_packs_them():
    # 3 x 0.6 GPU is 1.8 GPUs, but no two of them fit on one GPU: a 2-GPU node takes two.
    with pytest.raises(ClusterSpecError, match=r"worker c \(0.6 GPUs\) does not fit"):
        assign_nodes([Demand(n, 0.6) for n in "abc"], [Node("10.0.0.1", 2)])
    nodes = [Node("10.0.0.1", 1), Node("10.0.0.2", 1)]
    got = assign_nodes(
        [Demand(n, g) for n, g in zip("abcd", (0.6, 0.4, 0.6, 0.4), strict=True)], nodes
    )
    assert {n: node.ip for n, node in got.items()} == {
        "a": "10.0.0.1",
        "b": "10.0.0.1",
        "c": "10.0.0.2",
        "d": "10.0.0.2",
    }


def test_random_assignments_never_overcommit_a_node():
    rng = random.Random()
    for _ in range(200):
        nodes = [Node(f"10.0.0.{i}", rng.choice([1, 2, 4, 8])) for i in range(rng.randint(1, 4))]
        demands = [
            Demand(f"w{i}", rng.choice([0.25, 0.5, 1, 2, 4, 8])) for i in range(rng.randint(1, 8))
        ]
        try:
            got = assign_nodes(demands, nodes)
        except ClusterSpecError as exc:
            assert "GPUs" in str(exc)
            continue
        assert list(got) == [d.name for d in demands]
        for node in nodes:
            assert sum(d.gpus for d in demands if got[d.name] is node) <= node.gpus + 1e-9


def _pinned_spec(**decode_c: object) -> dict:
    return {
        "model": "/m",
        "device": "cpu",
        "transfer_backend": "mooncake_tcp",
        "workers": [
            {"role": "prefill", "node_labels": {"host": "a"}},
            {"name": "decode-b", "role": "decode", "count": 2, "node_labels": {"host": "b"}},
            {"name": "decode-c", "role": "decode", "node_resources": {"slot": 1}, **decode_c},
            {"name": "free", "role": "decode", "count": 2},
        ],
    }


# Two raylets on one address (10.0.0.2): two nodes, told apart by their ids.
NODES = [
    Node("10.0.0.1", 0, "a" * 56, {"host": "a"}),
    Node("10.0.0.2", 0, "b1" * 28, {"host": "b"}),
    Node("10.0.0.2", 0, "b2" * 28, {"host": "b"}, {"slot": 1.0}),
]


def test_pinned_groups_run_on_their_nodes_and_raylets_sharing_an_address_are_two():
    plan = build_plan(parse_spec(_pinned_spec()), NODES, router_host="10.0.0.1", log_dir="/l")
    where = {w.name: w.node_id[:2] for w in plan.workers}
    # Pinned by label and by custom resource; the unpinned ones to the least loaded node.
    assert where == {
        "prefill-0": "aa",
        "decode-b-0": "b1",
        "decode-b-1": "b2",
        "decode-c-0": "b2",
        "free-0": "aa",
        "free-1": "b1",
    }
    b0, b1 = plan.worker("decode-b-0"), plan.worker("decode-b-1")
    assert b0.host == b1.host == "10.0.0.2" and b0.node_id != b1.node_id
    text = plan.render()
    assert re.search(r"^decode-b-1\s+decode\s+10\.0\.0\.2\s+b2b2b2b2\s", text, re.M), text
    assert "  decode-b: labels host=b\n  decode-c: resources slot: 1\n" in text
    # The same worker counts with GPUs: keyed by address, the second raylet's GPU was lost.
    two = [Node("10.0.0.2", 1, "n1"), Node("10.0.0.2", 1, "n2")]
    got = assign_nodes([Demand("p", 1), Demand("d", 1)], two)
    assert {n: node.node_id for n, node in got.items()} == {"p": "n1", "d": "n2"}


def test_a_pin_no_node_can_take_is_one_line():
    with pytest.raises(ClusterSpecError) as full:
        build_plan(parse_spec(_pinned_spec(count=2)), NODES, router_host="h", log_dir="/l")
    assert str(full.value).startswith(
        "worker decode-c-1 has no node: every node with its pins (resources slot: 1) is full "
        "(nodes: 10.0.0.1 node aaaaaaaa (host=a); 10.0.0.2 node b1b1b1b1 (host=b); "
    )
    with pytest.raises(ClusterSpecError) as nowhere:
        build_plan(parse_spec(_pinned_spec(node_labels={"host": "z"})), NODES, router_host="h")
    assert "worker decode-c-0 has no node: it is pinned to labels host=z and resources " in str(
        nowhere.value
    )


def test_workers_of_a_lost_node_are_placed_again_where_their_pins_allow():
    plan = build_plan(parse_spec(_pinned_spec()), NODES, router_host="10.0.0.1", log_dir="/l")
    current = {w.name: w for w in plan.workers}
    live = [NODES[0], NODES[2]]  # b1's raylet is gone
    lost = list(lost_workers(current, live, {}))
    assert lost == ["decode-b-0", "free-1"]
    # A worker whose supervising actor died (on a live node) is lost too.
    died = {"free-0": {"state": "unreachable", "error": "killed", "actor_died": True}}
    assert lost_workers(current, live, died)["free-0"] == ("its supervisor died (killed)", False)
    running = {n: w for n, w in current.items() if n not in lost}
    again = places(plan, lost, running, live)
    # decode-b-0 may only go to the other host=b node; free-1 to the least loaded one.
    assert {n: w.node_id[:2] for n, w in again.items()} == {"decode-b-0": "b2", "free-1": "aa"}
    w, old = again["free-1"], current["free-1"]
    assert (w.port, w.log, w.host) == (old.port, old.log, "10.0.0.1")
    assert w.env["SGLANG_HOST_IP"] == w.command[w.command.index("--host") + 1] == "10.0.0.1"
    # With no host=b node at all, decode-b-0 waits (asked again at the next poll).
    assert list(places(plan, ["decode-b-0"], running, [NODES[0]])) == []
