"""The cluster spec: the example loads; every kind of mistake gets a message naming it."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sglang_engram.cluster.spec import ClusterSpecError, load_spec, parse_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE = EXAMPLES / "pd-cluster.yaml"

VALID = {
    "name": "t",
    "model": "/models/tiny",
    "transfer_backend": "mooncake",
    "workers": [
        {"role": "prefill", "engram_offload": "hbm"},
        {"role": "decode", "engram_offload": "off"},
    ],
}


def _spec(**changes: object) -> dict:
    data = copy.deepcopy(VALID)
    data.update(changes)
    return data


def _group(index: int, **changes: object) -> dict:
    data = copy.deepcopy(VALID)
    data["workers"][index].update(changes)
    return data


def _error(data: dict) -> str:
    with pytest.raises(ClusterSpecError) as info:
        parse_spec(data)
    return str(info.value)


def test_example_spec_is_the_issue_deployment():
    spec = load_spec(EXAMPLE)
    assert spec.name == "pd-cluster"
    assert spec.transfer_backend in ("mooncake", "nixl")
    (prefill,) = [g for g in spec.workers if g.role == "prefill"]
    (decode,) = [g for g in spec.workers if g.role == "decode"]
    assert (prefill.count, prefill.engram_offload) == (1, "hbm")
    assert (decode.count, decode.engram_offload) == (1, "off")
    assert spec.warnings == []


def _variants(text: str) -> list[dict]:
    """The example's commented decode groups (``# - name: ...`` blocks), uncommented."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("  # - "):
            current = [line.replace("  # - ", "  - ", 1)]
            blocks.append(current)
        elif current is not None and line.startswith("  #   "):
            current.append(line.replace("  #   ", "    ", 1))
        else:
            current = None
    return [yaml.safe_load("\n".join(b))[0] for b in blocks]


def test_each_commented_decode_variant_of_the_example_is_a_valid_group():
    data = yaml.safe_load(EXAMPLE.read_text())
    variants = _variants(EXAMPLE.read_text())
    assert [v["engram_offload"] for v in variants] == ["dram", "ssd"]
    for variant in variants:
        workers = [g for g in data["workers"] if g["role"] != "decode"] + [variant]
        spec = parse_spec({**data, "workers": workers})
        (decode,) = [g for g in spec.workers if g.role == "decode"]
        assert decode.engram_offload == variant["engram_offload"] and spec.warnings == []
    # the ssd variant seeds from a profile and writes one served profile per worker
    ssd = next(
        g
        for g in parse_spec({**data, "workers": [data["workers"][0], variants[1]]}).workers
        if g.role == "decode"
    )
    flags = ssd.engram_flags
    assert flags[flags.index("--engram-seed-profile") + 1] == "/nvme/profiles/served.npz"
    assert "--engram-profile-out" in flags


def test_hosts_example_pins_each_group_to_its_host():
    spec = load_spec(EXAMPLES / "pd-cluster-hosts.yaml")
    assert spec.device == "cpu" and spec.transfer_backend == "mooncake_tcp"
    pins = {g.name: (g.engram_offload, g.pins) for g in spec.workers}
    assert pins == {
        "prefill": ("hbm", "labels host=a"),
        "decode-b": ("dram", "labels host=b"),
        "decode-c": ("off", "resources host-c: 1"),
    }
    assert spec.warnings == []


def test_cpu_example_is_prefill_dram_and_decode_off_without_gpus(monkeypatch):
    monkeypatch.chdir(EXAMPLES.parent)  # the example's model path is relative to the repo
    spec = load_spec(EXAMPLES / "pd-cluster-cpu.yaml")
    assert (spec.name, spec.device, spec.transfer_backend) == (
        "pd-cluster-cpu",
        "cpu",
        "mooncake_tcp",
    )
    assert [(g.role, g.engram_offload) for g in spec.workers] == [
        ("prefill", "dram"),
        ("decode", "off"),
    ]
    # NOTE: absolute once the model is built there (the test below), as written before
    assert spec.model.endswith("models/tiny-engram")
    assert spec.warnings == []
    assert load_spec(EXAMPLE).device == "gpu"  # the default


def test_a_relative_model_path_is_made_absolute_only_where_it_exists(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path)
    assert parse_spec(_spec(model="here")).model == str(tmp_path / "here")
    assert parse_spec(_spec(model="org/some-model")).model == "org/some-model"  # a hub id


def test_device_mistakes_are_one_line():
    msg = _error(_spec(device="cpux"))
    assert msg == "spec: device: Input should be 'gpu' or 'cpu', not 'cpux' (did you mean 'cpu'?)"
    assert (
        _error(_spec(device="metal")) == "spec: device: Input should be 'gpu' or 'cpu', not 'metal'"
    )
    msg = _error({**_group(1, gpus_per_worker=1), "device": "cpu"})
    assert msg == (
        "spec: workers[1].gpus_per_worker: device cpu runs workers without GPUs; "
        "remove gpus_per_worker (or set device: gpu)"
    )
    msg = _error(_group(0, extra_args=["--device", "cuda"]))
    assert "workers[0].extra_args: sets --device, which the launcher sets from the spec" in msg
    (warning,) = parse_spec(_spec(device="cpu")).warnings  # transfer_backend mooncake
    assert warning.startswith("device cpu with transfer_backend mooncake: mooncake_tcp is")


def test_yaml_bare_off_means_off(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "model: /m\ntransfer_backend: nixl\nworkers:\n"
        "  - {role: prefill}\n  - {role: decode, engram_offload: off}\n"
    )
    spec = load_spec(path)
    assert spec.name == "s"
    assert [g.engram_offload for g in spec.workers] == ["dram", "off"]
    assert spec.workers[1].engram_flags == ["--engram-offload", "off"]


def test_unknown_keys_are_named_with_a_suggestion():
    msg = _error(_spec(transfer_backnd="nixl"))
    assert msg.startswith("spec: transfer_backnd: unknown key (did you mean 'transfer_backend'?)")
    msg = _error(_group(1, engram_offlod="dram"))
    assert msg.startswith(
        "spec: workers[1].engram_offlod: unknown key (did you mean 'engram_offload'?)"
    )
    msg = _error(_spec(router={"port": 8000, "polcy": "random"}))
    assert msg.startswith("spec: router.polcy: unknown key (did you mean 'policy'?)")
    assert "\n" not in msg


def test_a_typo_of_a_required_key_names_the_typo_and_the_missing_key():
    data = _spec(transfer_backnd="nixl")
    del data["transfer_backend"]
    assert _error(data) == (
        "spec: transfer_backnd: unknown key (did you mean 'transfer_backend'? it is required "
        "and missing); allowed keys: name, model, device, transfer_backend, workers, router, "
        "base_port, bootstrap_base_port, restart, timeouts, log_dir"
    )
    data = _group(0, rol="prefill")
    del data["workers"][0]["role"]
    assert _error(data).startswith(
        "spec: workers[0].rol: unknown key (did you mean 'role'? it is required and missing)"
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"tp_size": 2, "gpus_per_worker": 1}, "gpus_per_worker 1 is less than tp_size 2"),
        ({"tp_size": 2, "gpus_per_worker": 3}, "gpus_per_worker 3 is not a multiple of tp_size 2"),
        ({"tp_size": 2, "gpus_per_worker": 0.5}, "shares a GPU, which only works with tp_size 1"),
        ({"gpus_per_worker": 1.5}, "gpus_per_worker 1.5 must be a whole number"),
        ({"gpus_per_worker": 0}, "gpus_per_worker: Input should be greater than 0, not 0"),
        ({"count": 0}, "count: Input should be greater than or equal to 1, not 0"),
        ({"tp_size": 0}, "tp_size: Input should be greater than or equal to 1"),
    ],
)
def test_impossible_gpu_counts(changes, expected):
    msg = _error(_group(0, **changes))
    assert msg.startswith("spec: workers[0]")
    assert expected in msg


def test_gpus_default_to_tp_size_and_may_be_shared():
    spec = parse_spec(_group(0, tp_size=4))
    assert spec.workers[0].gpus_per_worker == 4
    spec = parse_spec(_group(1, gpus_per_worker=0.5))
    assert spec.workers[1].gpus_per_worker == 0.5


def test_off_on_prefill_warns_and_on_decode_does_not():
    spec = parse_spec(_group(0, engram_offload="off"))
    (warning,) = spec.warnings
    assert "workers[0]: engram_offload off on a prefill worker" in warning
    assert parse_spec(VALID).warnings == []


def test_engram_options_checked_against_the_placement():
    assert "engram_offload ssd needs engram_ssd_dir" in _error(_group(0, engram_offload="ssd"))
    assert (
        "workers[0].engram_offload: Input should be 'hbm', 'dram', 'ssd' or 'off', not 'nvme'"
        in _error(_group(0, engram_offload="nvme"))
    )
    assert _error(_group(0, engram_offload="dramm")).endswith("(did you mean 'dram'?)")
    assert "engram_hot_cache_gb: Input should be greater than or equal to 0" in _error(
        _group(1, engram_hot_cache_gb=-1)
    )
    spec = parse_spec(_group(0, engram_offload="hbm", engram_hot_cache_gb=2))
    assert spec.warnings[0] == (
        "workers[0]: engram_hot_cache_gb is ignored with engram_offload hbm (it applies to "
        "dram and ssd only)"
    )
    group = parse_spec(
        _group(
            0,
            engram_offload="ssd",
            engram_ssd_dir="/nvme/t",
            engram_ram_cache_gb=8,
            engram_prefetch=False,
            engram_hot_cache_gb=1.5,
            engram_ssd_read="direct",
            engram_seed_profile="/nvme/profile.npz",
        )
    ).workers[0]
    assert group.engram_flags == [
        "--engram-offload",
        "ssd",
        "--engram-ssd-dir",
        "/nvme/t",
        "--no-engram-prefetch",
        "--engram-hot-cache-gb",
        "1.5",
        "--engram-ram-cache-gb",
        "8",
        "--engram-ssd-read",
        "direct",
        "--engram-seed-profile",
        "/nvme/profile.npz",
    ]
    assert (
        "engram_seed_profile /nvme/profile.npz seeds the RAM cache of ssd tables, but this "
        "server's placement is dram; pass engram_offload ssd or leave the profile out"
        in _error(_group(0, engram_offload="dram", engram_seed_profile="/nvme/profile.npz"))
    )
    ssd = {"engram_offload": "ssd", "engram_ssd_dir": "/nvme/t"}
    group = parse_spec(_group(0, **ssd, engram_profile_out="/nvme/served.npz")).workers[0]
    assert group.engram_flags[-2:] == ["--engram-profile-out", "/nvme/served.npz"]
    assert (
        "engram_profile_out /nvme/served.npz writes the rows ssd tables served, but this "
        "server's placement is dram; pass engram_offload ssd or leave it out"
        in _error(_group(0, engram_offload="dram", engram_profile_out="/nvme/served.npz"))
    )
    assert (
        "engram_profile_out /nvme/served.npz: the group's 2 workers would write one file; put "
        "{worker} in the path (it becomes each worker's name)"
    ) in _error(_group(0, **ssd, count=2, engram_profile_out="/nvme/served.npz"))
    assert "engram_ssd_read: Input should be 'mmap', 'pread' or 'direct', not 'uring'" in _error(
        _group(0, engram_offload="ssd", engram_ssd_dir="/nvme/t", engram_ssd_read="uring")
    )
    spec = parse_spec(_group(0, engram_offload="dram", engram_ssd_read="direct"))
    assert (
        "engram_ssd_read is ignored with engram_offload dram (it applies to ssd only)"
        in (spec.warnings[0])
    )


def test_roles_backend_and_required_keys():
    assert "role: Input should be 'prefill' or 'decode', not 'mixed'" in _error(
        _group(0, role="mixed")
    )
    assert "no decode worker group" in _error(
        _spec(workers=[{"role": "prefill"}, {"role": "prefill", "name": "p2"}])
    )
    assert "two worker groups are named 'prefill'" in _error(
        _spec(workers=[{"role": "prefill"}, {"role": "prefill"}, {"role": "decode"}])
    )
    assert (
        "transfer_backend: Input should be 'mooncake', 'mooncake_tcp', 'nixl' or 'fake', not 'tcp'"
        in _error(_spec(transfer_backend="tcp"))
    )
    data = _spec()
    del data["model"]
    assert _error(data) == "spec: model: required key is missing"
    assert "workers[0].count: Input should be a valid integer, not True" in _error(
        _group(0, count=True)
    )
    assert "workers: must not be empty" in _error(_spec(workers=[]))
    assert "workers[1].name: must use lowercase letters" in _error(_group(1, name="Decode"))
    fake = parse_spec(_spec(transfer_backend="fake"))
    assert any("fake moves no KV cache" in w for w in fake.warnings)


def test_extra_args_may_not_set_launcher_flags():
    msg = _error(_group(1, extra_args=["--port=4000"]))
    assert "workers[1].extra_args: sets --port, which the launcher sets from the spec" in msg
    msg = _error(_spec(router={"extra_args": ["--decode", "http://x:1"]}))
    assert msg.startswith("spec: router.extra_args: sets --decode")
    spec = parse_spec(_group(0, extra_args=["--mem-fraction-static", 0.5]))
    assert spec.workers[0].extra_args == ("--mem-fraction-static", "0.5")


def test_keys_are_the_launchers_and_pins_name_custom_resources(tmp_path, monkeypatch):
    for flag in ("--api-key", "--admin-api-key", "--config"):
        assert f"sets {flag}, which the launcher" in _error(_group(0, extra_args=[flag, "k"]))
    assert "sets --api-key" in _error(_spec(router={"extra_args": ["--api-key=k"]}))
    msg = _error(_group(1, node_resources={"GPU": 1}))
    assert msg == "spec: workers[1].node_resources: GPU is Ray's own resource; pin by a custom one"
    assert "host-b: 0 must be above 0" in _error(_group(1, node_resources={"host-b": 0}))
    assert "node_labels.host: Input should be a valid string" in _error(
        _group(1, node_labels={"host": 2})
    )
    spec = parse_spec(_group(1, node_labels={"host": "b"}, node_resources={"host-b": 1}))
    assert spec.workers[1].pins == "labels host=b and resources host-b: 1"
    assert spec.workers[0].pins == "" and spec.router.api_key_file is None
    monkeypatch.chdir(tmp_path)  # the clients' key file: made absolute where `up` runs
    spec = parse_spec(_spec(router={"api_key_file": "keys/clients"}))
    assert spec.router.api_key_file == str(tmp_path / "keys" / "clients")


def test_overlapping_ports_are_refused():
    msg = _error(_spec(base_port=8000, router={"port": 8001}))
    assert msg.startswith("spec: worker ports")
    assert "worker ports 8000-8001 overlap router port 8001" in msg
    msg = _error(_spec(bootstrap_base_port=30001))
    assert "worker ports 30000-30001 overlap bootstrap ports 30001" in msg
    assert "worker ports must lie in 1-65535, not 65535-65536" in _error(_spec(base_port=65535))


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ClusterSpecError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers: [\n")
    with pytest.raises(ClusterSpecError, match="is not valid YAML"):
        load_spec(bad)
    # A schema error names the file and the field, on one line.
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        "model: /m\ntransfer_backend: nixl\nworkers:\n  - {role: prefill}\n"
        "  - {role: decode, count: two}\n"
    )
    with pytest.raises(ClusterSpecError) as info:
        load_spec(wrong)
    assert str(info.value) == (
        f"{wrong}: workers[1].count: Input should be a valid integer, not 'two'"
    )


def test_the_declared_read_strategies_are_the_readers_shipped():
    """What a spec or command line may name is what ``engram.ssd.readers`` registers on
    import (in a fresh interpreter: tests here register readers of their own)."""
    from engram.ssd.read_strategies import DEFAULT_READER, READ_STRATEGIES

    shipped = subprocess.run(
        [sys.executable, "-c", "from engram.ssd.readers import reader_names as r; print(*r())"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert shipped == list(READ_STRATEGIES) and DEFAULT_READER in shipped


def test_restart_policy_is_checked():
    assert parse_spec(_spec(restart={"max_restarts": 5})).restart.max_restarts == 5
    msg = _error(_spec(restart={"backoff_s": 5, "max_backoff_s": 1}))
    assert msg == "spec: restart: max_backoff_s must be at least backoff_s"
    assert "restart.max_restarts: Input should be greater than or equal to 0" in _error(
        _spec(restart={"max_restarts": -1})
    )
    msg = _error(_spec(restart={"probe_timeout_s": 5.0, "hang_timeout_s": 4.0}))
    assert msg == (
        "spec: restart: hang_timeout_s must be at least probe_timeout_s (one slow answer is "
        "not a hang)"
    )


def test_timeouts_are_checked_against_sglangs_own_limits():
    spec = parse_spec(_spec(timeouts={"kv_bootstrap_s": 12, "prefill_heartbeat_s": 3.5}))
    assert spec.timeouts.worker_env["SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"] == "12"
    assert spec.timeouts.worker_env["SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"] == "3.5"
    # SGLang raises a heartbeat interval below 2 s to 2 s: the spec says so instead.
    assert "timeouts.prefill_heartbeat_s: Input should be greater than or equal to 2" in _error(
        _spec(timeouts={"prefill_heartbeat_s": 1.0})
    )
    assert _error(_spec(timeouts={"kv_bootstrap": 5})).startswith(
        "spec: timeouts.kv_bootstrap: unknown key (did you mean 'kv_bootstrap_s'?)"
    )
    # The router's flags that the spec sets are not for extra_args.
    assert "sets --disable-circuit-breaker, which the launcher sets from the spec" in _error(
        _spec(router={"extra_args": ["--disable-circuit-breaker"]})
    )
