"""Bad input to every command line: exit 2, exactly one ``error:`` line on stderr, no
traceback (``engram.cli``). Each row runs the real command in a child process; most fail
before torch or SGLang is imported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from sglang_engram.compare.resume import spec_record
from sglang_engram.compare.spec import parse_sweep_spec

from engram.model.builder import TRAINED_MODEL

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PD = EXAMPLES / "pd-cluster.yaml"
SWEEP = EXAMPLES / "sweep-placements.yaml"
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present here")


def _row(**kw: object) -> dict:
    return {
        "config": "a",
        "sku": "H200",
        "status": "ok",
        "max_concurrency": 1,
        "num_gpus": 1,
        "total_throughput": 100.0,
        "p90_tpot_ms": 5.0,
        **kw,
    }


def _sweep(input_len: int) -> dict:
    return {
        "name": "s",
        "model": "m",
        "workload": {"fixed": {"input_len": input_len, "output_len": 8}},
        "concurrency": [1],
        "configs": [{"name": "a", "url": "http://127.0.0.1:9", "num_gpus": 1, "placement": "dram"}],
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every bad input file the rows name, in one folder."""
    d = tmp_path_factory.mktemp("bad")
    for name, change in (("nosafet", None), ("badcfg", '{"hidden_size": '), ("wronghid", 64)):
        shutil.copytree(TRAINED_MODEL, d / name)
        if change is None:
            (d / name / "model.safetensors").unlink()
        elif isinstance(change, str):
            (d / name / "config.json").write_text(change)
        else:
            cfg = json.loads((d / name / "config.json").read_text())
            (d / name / "config.json").write_text(json.dumps({**cfg, "hidden_size": change}))
    (d / "nonutf8.yaml").write_bytes(b"name: x\n\xff\xfe bad\n")
    (d / "typo.yaml").write_text(PD.read_text().replace("transfer_backend:", "transfer_backnd:"))
    spec = _sweep(8)
    spec["configs"][0]["placement"] = "nvme"
    (d / "urlnvme.yaml").write_text(yaml.safe_dump(spec))
    for name, rows in {
        "neg": [_row(p90_tpot_ms=-3)],
        "nan": [_row(total_throughput=float("nan"))],
        "nosku": [_row(), {k: v for k, v in _row().items() if k != "sku"}],
        "good": [_row()],
    }.items():
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    (d / "blocker").write_text("a file where a directory is expected")
    (d / "array.jsonl").write_text("[1, 2]\n")
    (d / "workers.yaml").write_text("model: m\ntransfer_backend: nixl\nworkers: 3\n")
    (d / "tabs.yaml").write_text("name: s\n\tmodel: m\n")
    port = _sweep(8)
    port["configs"][0]["url"] = "http://127.0.0.1:99999"
    (d / "port.yaml").write_text(yaml.safe_dump(port))
    # A run directory measured with input_len 64, and the spec changed to 32 since.
    run = d / "run"
    run.mkdir()
    (run / "spec.json").write_text(spec_record(parse_sweep_spec(_sweep(64))))
    (run / "results.jsonl").write_text(json.dumps(_row(workload={"kind": "fixed"})) + "\n")
    (d / "spec32.yaml").write_text(yaml.safe_dump(_sweep(32)))
    return d


ROWS = [
    # engram.model
    ("engram.model", "generate --max-new-tokens -1", "argument --max-new-tokens: must be a whole number >= 1, not '-1'"),
    ("engram.model", "generate --model {d}/missing", "model directory {d}/missing does not exist; build one"),
    ("engram.model", "generate --model {d}/nosafet", "{d}/nosafet has no model.safetensors"),
    ("engram.model", "generate --model {d}/badcfg", "{d}/badcfg/config.json is not valid JSON"),
    ("engram.model", "generate --model {d}/wronghid", "{d}/wronghid/model.safetensors does not match"),
    pytest.param("engram.model", "generate --device cuda", "torch sees no CUDA or ROCm GPU here; pass --device cpu", marks=NO_GPU),
    ("engram.model", "build --out {d}/b --seed 5", "--seed shapes only a --random build"),
    ("engram.model", "build --out {d}/b --random --engram-max-ngram-size 3", "must be a power of two >= 2, not '3'"),
    ("engram.model", "build --out {d}/b --engram-table-gib 1", "--engram-table-gib shapes only a --random build"),
    ("engram.model", "build --out {d}/b --random --engram-table-gib 0", "argument --engram-table-gib: must be a number > 0, not '0'"),
    ("engram.model", "build --out {d}/b --random --engram-table-gib 1 --engram-vocab-size 900", "--engram-table-gib and --engram-vocab-size both set the table size; give one"),
    # engram.eval
    ("engram.eval", "ablate --k 0", "argument --k: must be a whole number >= 1, not '0'"),
    ("engram.eval", "gate-scan --model {d}/missing", "model directory {d}/missing does not exist"),
    # engram.convert
    ("engram.convert", "--checkpoint {d}/missing --out {d}/c", "checkpoint directory {d}/missing does not exist"),
    ("engram.convert", "--checkpoint {d} --out {d}/c --chunk-mib 0", "argument --chunk-mib: must be a number > 0"),
    # sglang_engram.cluster
    ("sglang_engram.cluster", f"plan {PD} --num-gpus 2.5", "argument --num-gpus: must be a whole number >= 1, not '2.5'"),
    ("sglang_engram.cluster", f"plan {PD} --num-gpus -2", "argument --num-gpus: must be a whole number >= 1, not '-2'"),
    ("sglang_engram.cluster", "plan {d}/nonutf8.yaml --num-gpus 2", "{d}/nonutf8.yaml is not UTF-8 text (byte 8 is 0xff)"),
    ("sglang_engram.cluster", "plan {d}/typo.yaml --num-gpus 2", "transfer_backnd: unknown key (did you mean 'transfer_backend'? it is required and missing)"),
    # sglang_engram.compare
    ("sglang_engram.compare", "sweep {d}/nonutf8.yaml --out {d}/s", "{d}/nonutf8.yaml is not UTF-8 text"),
    ("sglang_engram.compare", "sweep {d}/urlnvme.yaml --out {d}/s", "configs[a].placement: Input should be 'hbm', 'dram', 'ssd' or 'off', not 'nvme'"),
    ("sglang_engram.compare", "sweep {d}/spec32.yaml --out {d}/run --resume", "{d}/run holds points of another sweep than this spec: workload.fixed.input_len 64 -> 32;"),
    ("sglang_engram.compare", f"sweep {SWEEP} --out {{d}}/blocker/out", "argument --out: {d}/blocker/out cannot be created: {d}/blocker is a file"),
    ("sglang_engram.compare", "report {d}/neg.jsonl --out {d}/r", "{d}/neg.jsonl:1: p90_tpot_ms is -3, which no measurement gives"),
    ("sglang_engram.compare", "report {d}/nan.jsonl --out {d}/r", "{d}/nan.jsonl:1: total_throughput is nan, which no measurement gives"),
    ("sglang_engram.compare", "report {d}/nosku.jsonl --out {d}/r", "{d}/nosku.jsonl:2: the point has no 'sku'"),
    ("sglang_engram.compare", "report {d}/binary.jsonl --out {d}/r", "{d}/binary.jsonl is not a results file (byte 128 is not UTF-8 text)"),
    ("sglang_engram.compare", "report {d}/good.jsonl --out {d}/blocker/r", "argument --out: {d}/blocker/r cannot be created"),
    # python -m sglang_engram doctor
    ("sglang_engram", "doctor --no-such-flag", "unrecognized arguments: --no-such-flag"),
    # bad input beyond the list
    ("engram.model", "", "the following arguments are required: command; see python -m engram.model --help"),
    ("engram.model", "train-tokenizer {d}/missing.txt --out {d}/tok.json", "argument files: {d}/missing.txt does not exist"),
    ("engram.model", "generate --placement ssd --ssd-dir {d}/blocker", "argument --ssd-dir: {d}/blocker is a file; give a directory"),
    ("engram.model", "generate \udcff\udcfe", "the prompt is not UTF-8 text"),
    ("engram.eval", "ablate --json {d}/blocker/x.json", "argument --json: {d}/blocker/x.json cannot be created: {d}/blocker is a file"),
    ("engram.eval", "ablate --data {d}", "argument --data: {d} is a directory, not a file"),
    ("sglang_engram.cluster", "plan {d}/workers.yaml --num-gpus 2", "{d}/workers.yaml: workers: must be a list, not 3"),
    ("sglang_engram.cluster", "status", "name the cluster: give its spec file or --name"),
    ("sglang_engram.compare", "sweep {d}/tabs.yaml --out {d}/s", "{d}/tabs.yaml is not valid YAML: found character '\\t' that cannot start any token (line 2, column 1)"),
    ("sglang_engram.compare", "sweep {d}/port.yaml --out {d}/s", "configs[a]: url http://127.0.0.1:99999 has a port outside 1-65535"),
    ("sglang_engram.compare", f"sweep {SWEEP} --out {{d}}/s --resume --force-new", "argument --force-new: not allowed with argument --resume"),
    ("sglang_engram.compare", "report {d}/array.jsonl --out {d}/r", "{d}/array.jsonl:1: a point is a JSON object, not list"),
    ("sglang_engram.compare", "report {d}/good.jsonl --out {d}/r --at 0", "argument --at: must be a number > 0, not '0'"),
]  # fmt: skip


def run_cli(module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "python"), str(ROOT / "sgl-kernel")])
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(("module", "args", "expected"), ROWS)
def test_bad_input_is_one_line_and_exit_2(
    files: Path, module: str, args: str, expected: str
) -> None:
    done = run_cli(module, *args.format(d=files).split())
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert expected.format(d=files) in done.stderr


def test_a_refused_resume_leaves_the_recorded_spec(files: Path) -> None:
    before = (files / "run" / "spec.json").read_bytes()
    done = run_cli(
        "sglang_engram.compare",
        "sweep",
        str(files / "spec32.yaml"),
        "--out",
        str(files / "run"),
        "--resume",
    )
    assert done.returncode == 2 and "--force-new" in done.stderr
    assert (files / "run" / "spec.json").read_bytes() == before
