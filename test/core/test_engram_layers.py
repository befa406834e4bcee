"""The order imports run in inside the core library ``engram``: foundations -> hashes and
row formats -> SSD storage -> rows and profiles -> placements -> the Engram layer ->
the tiny model -> tools. Every import counts, at module level, inside a function or under
``TYPE_CHECKING``: a module may import its own layer and the layers below, never one
above."""

from __future__ import annotations

from pathlib import Path

from test.core.import_graph import imports, module_name, upward_imports

ROOT = Path(__file__).resolve().parents[2]
ENGRAM = ROOT / "engram"

# NOTE: from the bottom up; a module belongs to the layer of its longest matching prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundations",
        (
            "engram",
            "engram.errors",
            "engram.files",
            "engram.primes",
            "engram.progress",
            "engram.cli",
            "engram.cli_paths",
            "engram.fp8",
            "engram.model_config",
            "engram.placements",
        ),
    ),
    (
        "hashes and row formats",
        (
            "engram.spec",
            "engram.presets",
            "engram.row_formats",
            "engram.token_map",
            "engram.hashing",
            "engram.ple_hashing",
        ),
    ),
    ("SSD storage", ("engram.ssd",)),
    ("rows and profiles", ("engram.rows", "engram.profile")),
    ("placements", ("engram.tables",)),
    ("the Engram layer", ("engram.layer",)),
    ("the tiny model", ("engram.model",)),
    ("tools", ("engram.convert", "engram.eval")),
)


def _engram_modules() -> dict[str, Path]:
    return {module_name(path, ROOT): path for path in sorted(ENGRAM.rglob("*.py"))}


def test_every_engram_module_has_a_layer_of_its_own() -> None:
    """Besides the package itself, every module is placed by a prefix of its own (not
    left to fall to the foundations under ``engram``)."""
    modules = _engram_modules()
    assert len(modules) > 100
    prefixes = [p for _, group in LAYERS for p in group if p != "engram"]
    placed = [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]
    assert sorted(set(modules) - set(placed)) == ["engram"]


def test_engram_imports_run_down_the_layers() -> None:
    assert upward_imports(_engram_modules(), LAYERS) == []


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_check_catches_an_arrow_back_up_in_each_form(tmp_path: Path) -> None:
    """A placement that imported the tiny model under TYPE_CHECKING, the SSD storage that
    imported a table inside a function, and a profile module that imported a placement
    relatively: each is reported, naming both modules and their layers."""
    root = tmp_path
    sources = {
        "engram.tables.bad": _write(
            root,
            "engram/tables/bad.py",
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from engram.model.config import TinyEngramConfig\n",
        ),
        "engram.ssd.bad": _write(
            root, "engram/ssd/bad.py", "def later():\n    import engram.tables.ssd\n"
        ),
        "engram.profile.bad": _write(root, "engram/profile/bad.py", "from ..tables import base\n"),
        "engram.hashing": _write(root, "engram/hashing.py", "from engram import fp8\n"),
    }
    found = upward_imports(sources, LAYERS)
    for line in (
        "engram.tables.bad (placements) imports engram.model.config (the tiny model)",
        "engram.ssd.bad (SSD storage) imports engram.tables.ssd (placements)",
        "engram.profile.bad (rows and profiles) imports engram.tables.base (placements)",
    ):
        assert line in found, found
    assert {line.split()[0] for line in found} == {
        "engram.tables.bad", "engram.ssd.bad", "engram.profile.bad"
    }  # fmt: skip
    assert set(imports(sources["engram.hashing"], "engram")) == {"engram", "engram.fp8"}
