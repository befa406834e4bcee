"""Which code may import which: the shipped packages (``engram``, ``engram_kernels``,
``sglang_engram``) never import what the tests and benchmarks share (``engram_testing``)
nor ``test`` or ``benchmark``; and nothing reaches into ``test/`` or ``benchmark/`` by
putting a folder on ``sys.path``: what both use is the ``engram_testing`` package."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    ROOT / "engram",
    ROOT / "sgl-kernel" / "engram_kernels",
    ROOT / "python" / "sglang_engram",
]
NEVER_IMPORTED_BY_SHIPPED = {"engram_testing", "test", "benchmark"}
# NOTE: the only sys.path changes allowed, each for a reason of its own: the GPU scripts
# run on a lent machine with a checkout and no install (engram and engram_kernels from
# the checkout), and the plugin puts its sgl_kernel stand-in first on a machine without
# a GPU. Any other file that changes sys.path fails, whatever the folder.
SYS_PATH_ALLOWED = {
    "benchmark/bench_gather.py",
    "benchmark/gather_cases.py",
    "benchmark/graph_break_check.py",
    "python/sglang_engram/integration/kernel_standin/__init__.py",
}
REACHED_INTO = {"test", "benchmark"}
MUTATORS = {"insert", "append", "extend", "remove", "pop", "clear"}


def _sources(*folders: Path) -> Iterator[Path]:
    for folder in folders:
        yield from sorted(folder.rglob("*.py"))


def _imported_roots(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def _is_sys_path(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript):
        node = node.value
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _sys_path_changes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every statement or call that changes ``sys.path`` (reading it is fine)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if _is_sys_path(node.func.value) and node.func.attr in MUTATORS:
                yield node
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_is_sys_path(t) for t in targets):
                yield node
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            if any(alias.name == "path" for alias in node.names):
                yield node


def _path_words(node: ast.AST) -> set[str]:
    """The path components named by string constants inside ``node``."""
    words: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            words |= set(Path(sub.value).parts)
    return words


def test_shipped_packages_never_import_the_shared_testing_code() -> None:
    found, files = {}, 0
    for path in _sources(*SHIPPED):
        files += 1
        bad = set(_imported_roots(ast.parse(path.read_text()))) & NEVER_IMPORTED_BY_SHIPPED
        if bad:
            found[str(path.relative_to(ROOT))] = sorted(bad)
    assert files > 100  # every module of the three packages was read
    assert found == {}


def test_no_file_reaches_into_test_or_benchmark_through_sys_path() -> None:
    changes: dict[str, list[str]] = {}
    for path in _sources(ROOT / "benchmark", ROOT / "test", ROOT / "python", *SHIPPED[:2]):
        for node in _sys_path_changes(ast.parse(path.read_text())):
            changes.setdefault(str(path.relative_to(ROOT)), []).append(ast.unparse(node))
    outside = {name: lines for name, lines in changes.items() if name not in SYS_PATH_ALLOWED}
    assert outside == {}
    # the allowed ones add the checkout's own package folders, never test/ or benchmark/
    for name in SYS_PATH_ALLOWED:
        tree = ast.parse((ROOT / name).read_text())
        for node in _sys_path_changes(tree):
            assert not _path_words(node) & REACHED_INTO, (name, ast.unparse(node))
    assert set(changes) == SYS_PATH_ALLOWED  # the check sees the ones it allows
