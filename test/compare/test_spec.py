"""Sweep specs: what they accept, the one-line errors for what they do not, the
benchmark arguments each workload becomes and the server arguments of a CPU sweep."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import yaml
from sglang_engram.compare.deployments import CPU_SERVER_ARGS, LaunchDeployment
from sglang_engram.compare.spec import SweepSpecError, load_sweep_spec, parse_sweep_spec
from sglang_engram.compare.workloads import bench_args, expected_requests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _base(**kw) -> dict:
    spec = {
        "name": "s",
        "model": "/m",
        "workload": {"fixed": {"input_len": 1024, "output_len": 128}},
        "concurrency": [1, 4],
        "configs": [{"name": "a", "launch": {"engram_offload": "dram"}}],
    }
    spec.update(kw)
    return spec


@pytest.mark.parametrize("name", ["sweep-placements.yaml", "sweep-pd.yaml", "sweep-cpu.yaml"])
def test_examples_load(name: str) -> None:
    spec = load_sweep_spec(EXAMPLES / name)
    assert spec.configs and spec.workload.kind == "fixed"
    assert spec.device == ("cpu" if "cpu" in name else "gpu")


def test_cpu_example_sweeps_three_placements_at_two_concurrencies() -> None:
    spec = load_sweep_spec(EXAMPLES / "sweep-cpu.yaml")
    assert spec.model == "models/tiny-engram" and len(spec.concurrency) >= 2
    offloads = {c.launch.engram_offload for c in spec.configs if c.launch}
    assert {"dram", "ssd", "off"} <= offloads


@pytest.mark.parametrize("device", ["cpu", "gpu"], ids=["cpu-sweep", "gpu-sweep"])
def test_cpu_sweeps_start_servers_on_the_cpu_engine(device: str, tmp_path: Path) -> None:
    extra = ["--max-total-tokens", str(random.randint(1024, 8192))]
    spec = parse_sweep_spec(
        _base(device=device, configs=[{"name": "a", "launch": {"extra_args": extra}}])
    )
    args = LaunchDeployment(spec.configs[0], spec, tmp_path).server_args(port=1234)
    text = " ".join(args)
    assert (" ".join(CPU_SERVER_ARGS) in text) == (device == "cpu")
    assert args[-2:] == extra  # after the CPU arguments, so a config's own value wins


def test_ssd_options_become_server_flags(tmp_path: Path) -> None:
    gb = random.choice([0.5, 1.25, 3.0])
    launch = {"engram_offload": "ssd", "engram_ssd_dir": "/nvme/t", "engram_ram_cache_gb": gb,
              "engram_ssd_read": "direct", "engram_seed_profile": "/nvme/p.npz",
              "engram_profile_out": "/nvme/served.npz"}  # fmt: skip
    spec = parse_sweep_spec(_base(configs=[{"name": "a", "launch": launch}]))
    text = " ".join(LaunchDeployment(spec.configs[0], spec, tmp_path).server_args(port=1234))
    assert (
        f"--engram-ram-cache-gb {gb:g} --engram-ssd-read direct --engram-seed-profile "
        "/nvme/p.npz --engram-profile-out /nvme/served.npz"
    ) in text


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"concurency": [1]}, ["concurency", "did you mean 'concurrency'"]),
        ({"configs": [{"name": "r", "url": "http://h:1", "num_gpus": 1, "placement": "nvme"}]},
         ["configs[r].placement", "'hbm', 'dram', 'ssd' or 'off', not 'nvme'"]),
        ({"configs": [{"name": "a", "launch": {"engram_offlod": "dram"}}]},
         ["configs[a].launch.engram_offlod", "did you mean 'engram_offload'"]),
        ({"configs": [{"name": "x", "launch": {}, "url": "http://h:1"}]}, ["configs[x]", "exactly one"]),
        ({"configs": [{"name": "r", "url": "http://h:1", "placement": "dram"}]}, ["configs[r]", "num_gpus"]),
        ({"device": "cpu", "configs": [{"name": "c", "url": "http://h:1", "num_gpus": 1,
          "placement": "dram"}]}, ["configs[c]", "cpu sweep", "no num_gpus"]),
        ({"configs": [{"name": "p", "url": "http://h:1", "num_gpus": 1}]}, ["configs[p]", "placement"]),
        ({"device": "tpu"}, ["device", "'gpu' or 'cpu'"]),
        ({"configs": [{"name": "s", "launch": {"engram_offload": "ssd"}}]}, ["configs[s]", "engram_ssd_dir"]),
        ({"configs": [{"name": "t", "launch": {"tp_size": 0}}]}, ["configs[t].launch.tp_size"]),
        ({"configs": [{"name": "d", "launch": {}}, {"name": "d", "url": "http://h:1",
          "num_gpus": 1, "placement": "hbm"}]}, ["repeat", "d"]),
        ({"concurrency": [4, 4]}, ["repeated"]),
        ({"workload": {"fixed": {"input_len": 8, "output_len": 4},
                       "multi-turn": {"system_prompt_len": 8, "question_len": 4, "output_len": 4}}},
         ["workload", "exactly one"]),
    ],
)  # fmt: skip
def test_bad_specs_are_one_line(change: dict, words: list[str]) -> None:
    with pytest.raises(SweepSpecError) as err:
        parse_sweep_spec(_base(**change), source="spec.yaml")
    text = str(err.value)
    assert "\n" not in text and text.startswith("spec.yaml: ")
    for word in words:
        assert word in text


def test_unreadable_yaml(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(SweepSpecError, match="not valid YAML"):
        load_sweep_spec(path)


def test_fixed_workload_arguments() -> None:
    c = random.randint(1, 64)
    spec = parse_sweep_spec(_base(concurrency=[c], seed=7))
    args = bench_args(spec, "http://h:1", c, "/o.jsonl")
    opts = dict(zip(args, args[1:], strict=False))
    assert opts["--dataset-name"] == "random-ids" and "--tokenize-prompt" in args
    assert opts["--num-prompts"] == str(10 * c) and opts["--max-concurrency"] == str(c)
    assert opts["--warmup-requests"] == str(2 * c) and opts["--random-range-ratio"] == "0.8"
    assert opts["--random-input-len"] == "1024" and opts["--output-file"] == "/o.jsonl"
    assert opts["--tokenizer"] == "/m" and opts["--backend"] == "sglang"
    assert expected_requests(spec, c) == 10 * c


def test_multi_turn_workload_arguments(tmp_path: Path) -> None:
    work = {"multi-turn": {"system_prompt_len": 2048, "question_len": 128, "output_len": 64,
                           "turns": 4, "sessions_per_prefix": 3}}  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_base(workload=work, concurrency=[4], tokenizer="/tok")))
    spec = load_sweep_spec(path)
    args = bench_args(spec, "http://h:1", 4, "/o.jsonl")
    opts = dict(zip(args, args[1:], strict=False))
    assert opts["--backend"] == "sglang-oai-chat"
    assert opts["--dataset-name"] == "generated-shared-prefix"
    assert opts["--gsp-num-turns"] == "4" and opts["--gsp-prompts-per-group"] == "3"
    assert opts["--gsp-num-groups"] == "14"  # ceil(40 sessions / 3 per prefix)
    assert opts["--tokenizer"] == "/tok"
    assert expected_requests(spec, 4) == 14 * 3 * 4


def _values(node: object, keys: set[str]) -> list[object]:
    """Every value of one of ``keys`` anywhere in a YAML tree."""
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k in keys]
        return found + [x for v in node.values() for x in _values(v, keys)]
    if isinstance(node, list):
        return [x for v in node for x in _values(v, keys)]
    return []


def test_examples_name_the_model_serve_sh_builds_and_quote_off() -> None:
    serve = (EXAMPLES.parent / "scripts" / "serve.sh").read_text()
    model = re.search(r"ENGRAM_MODEL_DIR:-([^}]+)\}", serve)[1]
    for path in sorted(EXAMPLES.glob("*.yaml")):
        text = path.read_text()
        data = yaml.safe_load(text)
        # an example of another model names the directory its header's command builds
        built = re.search(r"checkpoint --out (\S+)", text)
        assert set(_values(data, {"model"})) == {built[1] if built else model}, path.name
        # NOTE: a bare `off` is YAML's false; the schemas take it, but the examples show
        # the spelling that means the same to every YAML reader.
        placements = _values(data, {"engram_offload", "placement"})
        assert placements and all(isinstance(p, str) for p in placements), path.name
