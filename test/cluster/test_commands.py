"""The planned command lines parse with the real parsers: SGLang 0.5.23's server flags plus
the plugin's --engram-* flags, and sglang-router's launcher in PD mode."""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

import pytest
import yaml
from sglang_engram.cluster.assignment import Node
from sglang_engram.cluster.plan import build_plan
from sglang_engram.cluster.spec import load_spec, parse_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pd-cluster.yaml"
pytestmark = pytest.mark.slow  # imports SGLang (~20 s)


def test_worker_and_router_commands_parse_with_the_real_parsers(tmp_path):
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.args.flags import add_engram_args
    from sglang_router.launch_router import parse_router_args

    spec = load_spec(EXAMPLE)
    plan = build_plan(spec, [Node("10.1.2.3", 2)], router_host="10.1.2.3", log_dir=str(tmp_path))
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    add_engram_args(parser)
    prefill, decode = plan.workers
    p = parser.parse_args(list(prefill.command[3:]))
    d = parser.parse_args(list(decode.command[3:]))
    assert (p.disaggregation_mode, d.disaggregation_mode) == ("prefill", "decode")
    assert p.disaggregation_transfer_backend == d.disaggregation_transfer_backend == "mooncake"
    assert p.disaggregation_bootstrap_port == prefill.bootstrap_port
    assert (p.port, d.port) == (prefill.port, decode.port)
    assert (p.engram_offload, d.engram_offload) == ("hbm", "off")
    assert p.enable_metrics and d.enable_metrics
    assert p.model_path == spec.model and p.tp_size == 1 and p.mem_fraction_static == 0.8

    router = parse_router_args(list(plan.router.command[3:]))
    assert router.pd_disaggregation
    assert router.prefill_urls == [(prefill.url, prefill.bootstrap_port)]
    assert router.decode_urls == [decode.url]
    assert (router.port, router.policy) == (8000, "cache_aware")
    assert router.prometheus_port == 29000
    # No retries unless the spec asks for them: a retried PD request can wait out SGLang's
    # bootstrap timeout on a dead decode worker. No circuit breaker unless asked for; the
    # router's health checks as often as the spec's timeouts say.
    assert router.retry_max_retries == 1 and router.disable_circuit_breaker
    assert router.health_check_interval_secs == 10
    data = {
        **yaml.safe_load(EXAMPLE.read_text()),
        "router": {"extra_args": ["--retry-max-retries", "4"], "circuit_breaker": True},
        "timeouts": {"router_health_check_s": 3},
    }
    plan = build_plan(parse_spec(data), [Node("10.1.2.3", 2)], router_host="h", log_dir="/l")
    router = parse_router_args(list(plan.router.command[3:]))
    assert router.retry_max_retries == 4 and not router.disable_circuit_breaker
    assert router.health_check_interval_secs == 3


def test_cpu_worker_commands_parse_as_the_cpu_engine_with_tcp_kv(tmp_path):
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.args.flags import add_engram_args

    spec = load_spec(EXAMPLE.with_name("pd-cluster-cpu.yaml"))
    plan = build_plan(spec, [Node("10.1.2.3", 0)], router_host="10.1.2.3", log_dir=str(tmp_path))
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    add_engram_args(parser)
    prefill, decode = (parser.parse_args(list(w.command[3:])) for w in plan.workers)
    for args in (prefill, decode):
        assert args.device == "cpu" and args.max_total_tokens == 32768
        assert args.disaggregation_transfer_backend == "mooncake_tcp"
    assert (prefill.engram_offload, decode.engram_offload) == ("dram", "off")


def test_each_worker_writes_its_own_served_profile(tmp_path):
    """``{worker}`` in engram_profile_out becomes each worker's name in its command."""
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.args.flags import add_engram_args

    data = yaml.safe_load(EXAMPLE.read_text())
    decode = next(g for g in data["workers"] if g["role"] == "decode")
    decode.update(
        count=2,
        engram_offload="ssd",
        engram_ssd_dir="/nvme/tables",
        engram_profile_out="/nvme/served-{worker}.npz",
    )
    plan = build_plan(parse_spec(data), [Node("10.1.2.3", 3)], router_host="h", log_dir="/l")
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    add_engram_args(parser)
    outs = {w.name: parser.parse_args(list(w.command[3:])).engram_profile_out for w in plan.workers}
    assert outs == {
        "prefill-0": None,
        "decode-0": "/nvme/served-decode-0.npz",
        "decode-1": "/nvme/served-decode-1.npz",
    }


def test_the_keys_reach_worker_and_router_through_their_private_config(tmp_path):
    """What `up` hands each process off its command line parses as its key flags: a
    worker's with SGLang's own --config merge, the router's with router_main's."""
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    from sglang_engram.args.flags import add_engram_args
    from sglang_engram.cluster.keys import ClusterKeys
    from sglang_engram.cluster.redaction import private_config
    from sglang_engram.cluster.router_main import with_config
    from sglang_router.launch_router import parse_router_args

    keys = ClusterKeys(admin=f"adm-{random.random()}", client=f"cli-{random.random()}")
    plan = build_plan(load_spec(EXAMPLE), [Node("10.1.2.3", 2)], router_host="h", log_dir="/l")
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    add_engram_args(parser)
    worker = private_config("prefill-0", keys.worker_config)
    router = private_config("router", keys.router_config)
    try:
        assert os.stat(worker).st_mode & 0o777 == 0o600
        argv = [*plan.workers[0].command[3:], "--config", worker]
        w = parser.parse_args(ConfigArgumentMerger(parser).merge_config_with_args(argv))
        assert (w.api_key, w.admin_api_key) == (keys.client, keys.admin)
        assert w.port == plan.workers[0].port  # the command line's flags stay
        r = parse_router_args(with_config([*plan.router.command[3:], "--config", router]))
        assert r.api_key == keys.client and r.prefill_urls == [(plan.workers[0].url, 8998)]
        assert r.control_plane_api_keys == [("up", "launcher", keys.admin, "admin")]
    finally:
        os.unlink(worker)
        os.unlink(router)
    assert keys.client not in repr(keys) and keys.admin not in repr(keys)
