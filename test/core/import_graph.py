"""What the layering tests read of the code: every module a source file imports (at
module level, inside a function or under ``TYPE_CHECKING``; relative imports resolved),
and the layer a module belongs to (its longest matching prefix)."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

Layers = Sequence[tuple[str, Sequence[str]]]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports(path: Path, package: str) -> Iterator[str]:
    """Every absolute module name ``path`` imports (relative imports resolved)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module
            # ``from package import module`` imports the module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def layer_of(module: str, layers: Layers) -> int | None:
    """The index in ``layers`` (bottom up) of ``module``'s longest matching prefix."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    return None if best is None else best[0]


def upward_imports(modules: dict[str, Path], layers: Layers) -> list[str]:
    """Each import of ``modules`` (name -> source) from a lower layer to a higher one."""
    upward: list[str] = []
    for module, path in modules.items():
        own = layer_of(module, layers)
        for imported in sorted(set(imports(path, package_of(module, path)))):
            theirs = layer_of(imported, layers)
            if own is not None and theirs is not None and theirs > own:
                upward.append(
                    f"{module} ({layers[own][0]}) imports {imported} ({layers[theirs][0]})"
                )
    return upward
