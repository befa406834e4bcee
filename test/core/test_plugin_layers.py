"""The order imports run in: ``engram_kernels`` -> ``engram`` -> the plugin, and inside
the plugin protocol -> what the families' layers share -> the families -> integration
-> tools. Every import counts, at module level, inside a function or under
``TYPE_CHECKING``: a module may import its own layer and the layers below, never one
above. (A family is found by its import path in ``protocol.registry``, not imported.)"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from test.core.import_graph import imports as _imports
from test.core.import_graph import layer_of, module_name, package_of, upward_imports

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "python" / "sglang_engram"

# NOTE: from the bottom up; a module belongs to the layer of its longest matching prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("protocol", ("sglang_engram.protocol",)),
    ("shared by the families' layers", ("sglang_engram.tables", "sglang_engram.forward")),
    ("families", ("sglang_engram.models",)),
    (
        "integration",
        (
            "sglang_engram",
            "sglang_engram.args",
            "sglang_engram.read_ahead",
            "sglang_engram.metrics",
            "sglang_engram.integration",
        ),
    ),
    (
        "tools",
        (
            "sglang_engram.__main__",
            "sglang_engram.cluster",
            "sglang_engram.compare",
            "sglang_engram.doctor",
            "sglang_engram.extras",
            "sglang_engram.server_process",
            "sglang_engram.spec_files",
        ),
    ),
)
# NOTE: the one family built on another: the tiny model's Engram layers are DeepSeek-V4.1's.
FAMILY_BASES = {"engram_qwen3": {"deepseek_v41"}}
# what each library below the plugin may not import
BELOW = {
    "engram_kernels": ("engram", "sglang_engram", "sglang", "engram_testing"),
    "engram": ("sglang_engram", "sglang", "engram_testing"),
}


def _layer(module: str) -> int | None:
    return layer_of(module, LAYERS)


def _plugin_modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PLUGIN.rglob("*.py")):
        # NOTE: the sgl_kernel stand-in is a package of its own, put on sys.path
        if "sgl_kernel" in path.relative_to(PLUGIN).parts:
            continue
        yield module_name(path, PLUGIN.parent), path


def _family(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "models" else None


def test_every_plugin_module_has_a_layer() -> None:
    modules = dict(_plugin_modules())
    assert len(modules) > 100
    assert [m for m in modules if _layer(m) is None] == []


def test_plugin_imports_run_down_the_layers() -> None:
    assert upward_imports(dict(_plugin_modules()), LAYERS) == []


def test_a_family_imports_no_other_family_but_its_base() -> None:
    crossing: list[str] = []
    for module, path in _plugin_modules():
        family = _family(module)
        if family is None:
            continue
        for imported in set(_imports(path, package_of(module, path))):
            other = _family(imported)
            if other not in (None, family) and other not in FAMILY_BASES.get(family, set()):
                crossing.append(f"{module} imports {imported}")
    assert crossing == []


@pytest.mark.parametrize("library", sorted(BELOW))
def test_the_libraries_below_the_plugin_never_import_up(library: str) -> None:
    root = ROOT / "sgl-kernel" if library == "engram_kernels" else ROOT
    found: list[str] = []
    for path in sorted((root / library).rglob("*.py")):
        module = module_name(path, root)
        for imported in set(_imports(path, package_of(module, path))):
            if imported.split(".")[0] in BELOW[library]:
                found.append(f"{module} imports {imported}")
    assert found == []


def test_the_check_sees_an_import_under_type_checking_and_a_relative_one(tmp_path) -> None:
    """A protocol module that named a family only for its types, or an integration
    module that imported the cluster relatively, would be caught."""
    source = tmp_path / "runtime.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from sglang_engram.models.qwen4_exp import family\n"
        "def later():\n"
        "    from ..cluster import spec\n"
    )
    found = set(_imports(source, "sglang_engram.protocol"))
    assert "sglang_engram.models.qwen4_exp.family" in found
    assert "sglang_engram.cluster.spec" in found
    layers = {_layer(m) for m in found if m.startswith("sglang_engram")}
    assert max(layers) > _layer("sglang_engram.protocol.runtime") == 0


# NOTE: where SGLang enters a process of ours: the plugin entry point, the serve backend
# SGLang asks before any plugin registers, and the doctor command. Every other module is
# handed the runtime.
RUNTIME_TAKEN_IN = {
    "sglang_engram.integration.plugin",
    "sglang_engram.integration.serve_backend",
    "sglang_engram.doctor.report",
}


def test_the_runtime_is_taken_only_where_sglang_enters() -> None:
    calls: dict[str, int] = {}
    for module, path in _plugin_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "get_runtime":
                calls[module] = calls.get(module, 0) + 1
    assert set(calls) == RUNTIME_TAKEN_IN
    assert sum(calls.values()) <= 5
