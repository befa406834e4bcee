"""The --engram-* flags through SGLang's own parser, and the config they carry."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
from sglang_engram.args.flags import ENGRAM_FLAGS
from sglang_engram.protocol.server_config import ENV_VAR, EngramServerConfig, config_of

from test.plugin.tiny import engram_fields, tiny_config, write_model_dir


@pytest.fixture
def model_dir(tmp_path):
    return str(write_model_dir(tmp_path / "tiny", tiny_config()))


@pytest.fixture
def parse(sglang_with_plugin, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args


def test_launch_server_help_lists_the_flags():
    out = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", "--help"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for flag in ENGRAM_FLAGS:
        assert flag in out.stdout
    assert "Engram (sglang-engram plugin)" in out.stdout


def test_sglang_serve_engram_backend_help_lists_the_flags():
    """``sglang serve --help`` runs before plugins load; our serve backend's help has
    the flags, and the general help offers it as a --model-type."""
    # NOTE: what the `sglang` console script runs
    sglang = [sys.executable, "-c", "from sglang.cli.main import main; main()", "serve"]
    general = subprocess.run([*sglang, "--help"], capture_output=True, text=True, timeout=600)
    assert general.returncode == 0, general.stderr[-2000:]
    assert "engram}" in general.stdout  # --model-type {auto,llm,diffusion,engram}
    ours = subprocess.run(
        [*sglang, "--model-type", "engram", "--help"], capture_output=True, text=True, timeout=600
    )
    assert ours.returncode == 0, ours.stderr[-2000:]
    for flag in ENGRAM_FLAGS:
        assert flag in ours.stdout


def test_sglang_serve_picks_the_engram_backend_for_engram_checkpoints(model_dir, tmp_path):
    from sglang.cli.serve import _create_backend_registry
    from sglang.cli.serve_backends import ServeRequest

    registry = _create_backend_registry()
    picked = registry.auto_detect(ServeRequest(argv=(), model_path=model_dir))
    assert picked.name == "engram"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text('{"model_type": "qwen3", "engram_layer_ids": []}')
    assert registry.auto_detect(ServeRequest(argv=(), model_path=str(plain))).name == "llm"
    hub_id = ServeRequest(argv=(), model_path="deepseek-ai/not-local")
    assert registry.auto_detect(hub_id).name == "llm"


def test_engram_flags_list_every_option_of_the_parser():
    import argparse

    from sglang_engram.args.flags import add_engram_args

    parser = argparse.ArgumentParser(add_help=False)
    add_engram_args(parser)
    assert {o for a in parser._actions for o in a.option_strings} == set(ENGRAM_FLAGS)


def test_placement_choices_come_from_the_core_registry(sglang_with_plugin):
    from sglang_engram.args.flags import placement_choices

    from engram.tables import placement_names

    assert placement_choices() == placement_names()
    assert {"hbm", "dram", "ssd", "off"} <= set(placement_choices())


def test_defaults_reach_the_server_config(parse, model_dir):
    args = parse(["--model-path", model_dir])
    config = config_of(args)
    assert config == EngramServerConfig(offload="dram", role="null")
    assert config.prefetch and config.hot_cache_gb == 0 and not config.offload_explicit


def test_parsed_values_reach_the_server_config(parse, model_dir):
    hot = round(0.01 + 0.5 * os.urandom(1)[0] / 255, 3)
    args = parse(
        [
            "--model-path",
            model_dir,
            "--engram-offload",
            "hbm",
            "--no-engram-prefetch",
            "--engram-hot-cache-gb",
            str(hot),
            "--disaggregation-mode",
            "decode",
        ]
    )
    config = config_of(args)
    assert (config.offload, config.prefetch, config.role) == ("hbm", False, "decode")
    assert config.hot_cache_gb == hot and config.offload_explicit
    assert "decode worker: hbm" in config.describe()


def test_config_survives_the_trip_to_a_scheduler_process(parse, model_dir):
    args = parse(
        ["--model-path", model_dir, "--engram-offload", "off", "--disaggregation-mode", "decode"]
    )
    # SGLang spawns schedulers with the record pickled; the environment is inherited.
    copy = pickle.loads(pickle.dumps(args))
    assert config_of(copy) == config_of(args)
    assert EngramServerConfig.from_json(os.environ[ENV_VAR]) == config_of(args)


def _resolved_backends(server_args) -> dict[str, str]:
    """The decode and prefill backends SGLang resolves from ``server_args``."""
    from sglang.srt.arg_groups.overrides import resolution_result

    server_args.resolve_once()
    config = resolution_result(server_args, "cuda_graph_config")
    return {"decode": config.decode.backend, "prefill": config.prefill.backend}


def test_host_lookups_keep_decode_graphs_on_the_breakable_backend(
    parse, model_dir, dsv4_dir, tmp_path, monkeypatch
):
    """ssd (any Engram model) and the tiny model: decode graphs stay on, with SGLang's
    breakable backend (the lookups are its eager breaks), as SGLang resolves them."""
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")  # resolving needs a device here
    ssd = ["--engram-offload", "ssd", "--engram-ssd-dir", str(tmp_path)]
    for argv in (["--model-path", model_dir], ["--model-path", dsv4_dir, *ssd]):
        args = parse([*argv, "--device", "cpu"])
        assert args.disable_cuda_graph is False and args.cuda_graph_backend_decode == "breakable"
        if argv[1] == model_dir:
            assert _resolved_backends(args)["decode"] == "breakable"
    # a PD prefill worker captures no decode graphs (SGLang turns them off)
    prefill = parse(["--model-path", model_dir, "--disaggregation-mode", "prefill"])
    assert prefill.cuda_graph_backend_decode is None and prefill.disable_cuda_graph is False


def test_graph_choices_are_kept_or_refused_in_one_line(parse, model_dir, dsv4_dir, tmp_path):
    ssd = ["--engram-offload", "ssd", "--engram-ssd-dir", str(tmp_path)]
    for model in (model_dir, dsv4_dir):
        argv = ["--model-path", model, *ssd]
        for choice in (
            ["--cuda-graph-backend-decode", "full"],
            ["--cuda-graph-backend-prefill", "full"],
            ["--cuda-graph-config", '{"decode": {"backend": "full"}}'],
        ):
            with pytest.raises(SystemExit) as exc:
                parse([*argv, *choice])
            assert str(exc.value).startswith("sglang-engram: error: --engram-offload ssd")
            assert "\n" not in str(exc.value) and "breakable" in str(exc.value)
        kept = parse([*argv, "--cuda-graph-backend-decode", "disabled"])
        assert kept.cuda_graph_backend_decode == "disabled" and not kept.disable_cuda_graph
        kept = parse([*argv, "--cuda-graph-config", '{"decode": {"backend": "breakable"}}'])
        assert kept.cuda_graph_backend_decode is None  # the JSON choice is SGLang's to apply
        assert parse([*argv, "--disable-decode-cuda-graph"]).cuda_graph_backend_decode is None
    # the tiny model's hbm/dram tables: a full graph is the user's choice
    chosen = parse(["--model-path", model_dir, "--cuda-graph-backend-decode", "full"])
    assert chosen.cuda_graph_backend_decode == "full" and chosen.disable_cuda_graph is False


def test_graphs_are_off_where_the_breakable_backend_cannot_serve(
    parse, model_dir, monkeypatch, capfd
):
    monkeypatch.setenv("SGLANG_MEMORY_SAVER_CUDA_GRAPH", "1")
    args = parse(["--model-path", model_dir, "--enable-memory-saver"])
    assert args.disable_cuda_graph is True
    # NOTE: SGLang's parser sets up its own logging to stderr (replacing caplog's)
    err = capfd.readouterr().err.splitlines()
    [line] = [line for line in err if "CUDA graphs are off" in line]
    assert "SGLANG_MEMORY_SAVER_CUDA_GRAPH" in line
    # without the memory saver the same server keeps its graphs
    assert parse(["--model-path", model_dir]).disable_cuda_graph is False


@pytest.fixture
def dsv4_dir(tmp_path):
    """A DeepSeek-V4.1-shaped config.json (small Engram tables)."""
    config = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": 129280,
        **engram_fields(layer_ids=(1, 14), n=4, heads=8, head_dim=64),
    }
    return str(write_model_dir(tmp_path / "dsv4", config))


def test_upstreams_hbm_and_dram_keep_sglangs_graph_choices(parse, dsv4_dir):
    # hbm/dram lookups (and the hot cache, which steps aside in a capture) keep graphs
    for offload in ("hbm", "dram"):
        argv = ["--model-path", dsv4_dir, "--engram-offload", offload]
        args = parse([*argv, "--engram-hot-cache-gb", "0.001"])
        assert args.disable_cuda_graph is False and args.cuda_graph_backend_decode is None
        chosen = parse([*argv, "--cuda-graph-backend-decode", "full"])
        assert chosen.cuda_graph_backend_decode == "full"


def test_unknown_placement_lists_the_choices(parse, model_dir, capsys):
    with pytest.raises(SystemExit) as exc:
        parse(["--model-path", model_dir, "--engram-offload", "nvme"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--engram-offload: invalid choice: 'nvme'" in err
    for name in ("hbm", "dram", "off"):
        assert name in err


def test_bad_flags_stop_the_launch_with_one_line(parse, model_dir):
    with pytest.raises(SystemExit) as exc:
        parse(["--model-path", model_dir, "--engram-hot-cache-gb", "-1"])
    assert str(exc.value) == "sglang-engram: error: --engram-hot-cache-gb must be >= 0, got -1"
    for value in ("nan", "inf"):  # int(inf * GIB) would crash the table open
        with pytest.raises(SystemExit) as exc:
            parse(["--model-path", model_dir, "--engram-ram-cache-gb", value])
        assert (
            str(exc.value)
            == f"sglang-engram: error: --engram-ram-cache-gb must be >= 0, got {value}"
        )
