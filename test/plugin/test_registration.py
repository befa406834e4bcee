"""The plugin is found through its entry point and every hook target exists upstream."""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
import subprocess
import sys

import pytest
from sglang_engram.integration import version_pin as compat
from sglang_engram.integration.hooks import CALL, HOOKS
from sglang_engram.protocol.runtime import get_runtime


def test_entry_point_is_discovered():
    eps = importlib.metadata.entry_points(group="sglang.srt.plugins")
    ours = [ep for ep in eps if ep.value == "sglang_engram.integration.plugin:register"]
    assert len(ours) == 1
    from sglang_engram.integration.plugin import register

    assert ours[0].load() is register


def test_pinned_version_is_installed():
    assert compat.installed_sglang_version() == compat.PINNED_SGLANG_VERSION
    assert compat.version_problem() is None


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.target)
def test_every_hook_target_exists_upstream(hook):
    # Fails loudly when SGLang renames or moves something we hook.
    target = hook.resolve_target()
    ours = hook.resolve_ours()
    if hook.with_runtime and hook.kind != CALL:
        ours = ours(get_runtime())  # the function (or class) the hook applies
    if hook.kind == "REPLACE":
        # Once applied, the module attribute is ours; the upstream class (defined there or
        # imported into it) is its base.
        upstream = [c for c in ours.__mro__[1:] if c.__name__ == hook.attr]
        assert inspect.isclass(target) and upstream and upstream[0].__module__.startswith("sglang.")
    elif hook.kind != CALL:
        assert callable(target) and callable(ours)


def test_each_target_is_hooked_once():
    """SGLang's registry patches a target once: a second hook on it would never run."""
    targets = [hook.target for hook in HOOKS]
    assert len(targets) == len(set(targets)), sorted(t for t in targets if targets.count(t) > 1)


def test_load_plugins_applies_every_hook(sglang_with_plugin):
    from sglang.srt.plugins.hook_registry import HookRegistry

    plugin = sglang_with_plugin
    for hook in HOOKS:
        hook.resolve_target()  # importing the module is what applies a deferred hook
        status = plugin.hook_status(get_runtime().hooks)
        assert status[hook.target] == "applied", status[hook.target]
        if hook.kind != CALL:
            assert hook.target in HookRegistry._patched


def test_register_is_idempotent(sglang_with_plugin):
    from sglang.srt.server_args import ServerArgs

    before = ServerArgs.add_cli_args
    sglang_with_plugin.register()
    sglang_with_plugin.register()
    assert ServerArgs.add_cli_args is before


def test_a_hook_that_cannot_apply_is_logged_not_raised(sglang_with_plugin, caplog):
    from sglang_engram.integration.hooks import Hook

    broken = Hook(
        "sglang.srt.server_args",
        "ServerArgs.no_such_method",
        "sglang_engram.args.flags:add_cli_args_hook",
        "AFTER",
        "test",
    )
    with caplog.at_level(logging.ERROR):
        assert sglang_with_plugin.apply_hook(get_runtime(), broken) is False
    assert sglang_with_plugin.hook_status(get_runtime().hooks)[broken.target].startswith(
        "failed: AttributeError"
    )
    assert "could not hook sglang.srt.server_args.ServerArgs.no_such_method" in caplog.text


def test_tiny_architecture_is_registered(sglang_with_plugin):
    from sglang.srt.models.registry import ModelRegistry
    from sglang_engram.models.engram_qwen3.model import EngramQwen3ForCausalLM

    cls, arch = ModelRegistry.resolve_model_cls(["EngramQwen3ForCausalLM"])
    assert cls is EngramQwen3ForCausalLM and arch == "EngramQwen3ForCausalLM"
    assert "EngramQwen3ForCausalLM" in ModelRegistry.get_supported_archs()


def test_tiny_config_parses_through_sglang(sglang_with_plugin, tmp_path):
    from sglang.srt.utils.hf_transformers.config import get_config

    from test.plugin.tiny import tiny_config, write_model_dir

    cfg = tiny_config()
    config = get_config(str(write_model_dir(tmp_path, cfg)), trust_remote_code=False)
    assert config.model_type == "engram_qwen3"
    assert list(config.engram_layer_ids) == cfg["engram_layer_ids"]
    assert list(config.engram_num_embeddings) == cfg["engram_num_embeddings"]


def test_doctor_reports_version_and_hooks():
    out = subprocess.run(
        [sys.executable, "-m", "sglang_engram", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    report = json.loads(out.stdout)
    assert report["sglang"] == {"installed": "0.5.23", "pinned": "0.5.23"}
    assert report["entry_point"] == "engram = sglang_engram.integration.plugin:register"
    assert report["serve_backend"] == "engram = sglang_engram.integration.serve_backend:backend"
    assert set(report["hooks"]) == {h.target for h in HOOKS}
    assert set(report["hooks"].values()) == {"applied"}
    # which code serves each placement's tables
    upstream, ours = "upstream SGLang's EngramEmbedding", "sglang-engram's tables"
    serving = report["serving"]
    assert set(serving) == {"hbm", "dram", "ssd", "off"}
    assert serving["hbm"]["deepseek_v41"] == f"{upstream} (device table)"
    assert serving["dram"]["deepseek_v41"] == f"{upstream} (pinned host table)"
    assert serving["dram"]["deepseek_v41 with --engram-hot-cache-gb"] == ours
    assert {serving[p]["deepseek_v41"] for p in ("ssd", "off")} == {ours}
    assert {who["engram_qwen3"] for who in serving.values()} == {ours}
    qwen4 = "upstream SGLang's Qwen4ExpNGramEmbedding"
    assert serving["hbm"]["qwen4_exp"] == f"{qwen4} (device table)"
    assert serving["dram"]["qwen4_exp"].startswith(f"{qwen4} (Qwen4ExpPinnedHostEmbedding")
    assert {serving[p]["qwen4_exp"] for p in ("ssd", "off")} == {ours}
    families = {f["name"]: f for f in report["families"]}
    assert set(families) == {"engram_qwen3", "deepseek_v41", "qwen4_exp", "longcat_flash"}
    assert not families["longcat_flash"]["served"]
    assert {who["longcat_flash"] for who in serving.values()} == {
        serving["hbm"]["longcat_flash"]
    } and "leaves it to upstream" in serving["hbm"]["longcat_flash"]
    assert {"hugepages_total", "transparent_hugepages"} <= set(report["host_memory"])
    assert "available" in report["gpu"]


_IMPORT_ORDER = """
import json, warnings
warnings.simplefilter("ignore")
from sglang.srt.plugins import load_plugins
load_plugins()
import {first}
import sglang.srt.layers.engram as upstream
from sglang_engram.integration import plugin
from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding
from sglang_engram.protocol.runtime import get_runtime
print(json.dumps({{
    "status": {{t: s for t, s in plugin.hook_status(get_runtime().hooks).items() if ".layers.engram." in t}},
    "replaced": upstream.EngramEmbedding is PlacedEngramEmbedding,
    "wrapped": hasattr(upstream.Engram.forward, "__wrapped__"),
}}))
"""


@pytest.mark.parametrize(
    "first", ["sglang_engram.models.deepseek_v41.layers", "sglang.srt.layers.engram"]
)
def test_engram_layer_hooks_apply_in_any_import_order(first):
    """Importing our DSv4.1 module before upstream's Engram layers (it imports them
    itself) must still apply both hooks on them."""
    import json

    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_ORDER.format(first=first)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    layer_hooks = {h.target for h in HOOKS if h.module == "sglang.srt.layers.engram"}
    assert len(layer_hooks) == 3
    assert report["status"] == dict.fromkeys(layer_hooks, "applied"), report
    assert report["replaced"] and report["wrapped"]
