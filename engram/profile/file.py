"""The profile file: one ``.npz`` (numpy's zip of arrays, read without pickle).

``header`` is a JSON document as uint8 bytes: ``format`` (:data:`FORMAT`), ``version``
(:data:`VERSION`), ``identity`` (:class:`~engram.profile.identity.HashIdentity`), ``top``
(rows kept per table at most) and ``corpus`` (files, bytes, tokens profiled). Per
layer ``L``: ``rows_L`` (int64 row ids of the layer's table, the most looked-up first;
ties by row id) and ``counts_L`` (int64, how many times the corpus looked each up).
Only a table's own arrays are read when it is seeded (``np.load`` reads members lazily).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engram.errors import EngramInputError
from engram.files import atomic_write
from engram.profile.identity import HashIdentity

FORMAT = "engram-row-profile"
VERSION = 1


@dataclass(frozen=True, eq=False)
class RowProfile:
    identity: HashIdentity
    top: int
    rows: dict[int, np.ndarray]  # layer -> row ids, the most looked-up first
    counts: dict[int, np.ndarray]  # layer -> hits of each of those rows
    corpus: dict[str, int] = field(default_factory=dict)

    def header(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "identity": self.identity.to_json(),
            "top": self.top,
            "corpus": self.corpus,
        }

    def save(self, path: str | Path) -> None:
        """Write the profile to ``path`` atomically."""
        arrays = {"header": np.frombuffer(json.dumps(self.header()).encode(), dtype=np.uint8)}
        for layer in self.identity.layers:
            arrays[f"rows_{layer}"] = np.asarray(self.rows[layer], dtype=np.int64)
            arrays[f"counts_{layer}"] = np.asarray(self.counts[layer], dtype=np.int64)
        atomic_write(path, lambda f: np.savez(f, **arrays))

    @classmethod
    def load(cls, path: str | Path) -> RowProfile:
        """Every table of the profile at ``path``."""
        header = read_header(path)
        identity = HashIdentity.from_json(header["identity"])
        with _open(path) as data:
            rows = {layer: _array(data, path, "rows", layer) for layer in identity.layers}
            counts = {layer: _array(data, path, "counts", layer) for layer in identity.layers}
        return cls(identity, int(header["top"]), rows, counts, dict(header["corpus"]))


def read_header(path: str | Path) -> dict[str, Any]:
    """The header of the profile at ``path``, its format and version checked."""
    with _open(path) as data:
        if "header" not in data.files:
            raise EngramInputError(f"{path} is not an Engram row profile (it has no header)")
        try:
            header = json.loads(data["header"].tobytes().decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EngramInputError(f"{path}: its profile header is unreadable ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else None
        raise EngramInputError(f"{path} is not an Engram row profile (format {found!r})")
    if header.get("version") != VERSION:
        raise EngramInputError(
            f"{path} is a version-{header.get('version')} row profile; this build reads "
            f"version {VERSION}: make it again with python -m engram.profile"
        )
    return header


def layer_rows(path: str | Path, layer: int) -> np.ndarray:
    """Row ids of layer ``layer``'s table in the profile at ``path``, the most
    looked-up first (only that table's array is read)."""
    identity = HashIdentity.from_json(read_header(path)["identity"])
    identity.table(layer)  # NOTE: raises naming the layers it has
    with _open(path) as data:
        return _array(data, path, "rows", layer)


def _array(data: Any, path: str | Path, what: str, layer: int) -> np.ndarray:
    name = f"{what}_{layer}"
    if name not in data.files:
        raise EngramInputError(
            f"{path} is damaged: its header names layer {layer}, it has no {name}"
        )
    array = data[name]
    if array.dtype != np.int64 or array.ndim != 1:
        raise EngramInputError(f"{path} is damaged: {name} is {array.dtype} {list(array.shape)}")
    return array


def _open(path: str | Path) -> Any:
    if not Path(path).is_file():
        what = "is a directory" if Path(path).is_dir() else "does not exist"
        raise EngramInputError(f"row profile {path} {what}")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise EngramInputError(f"{path} is not an Engram row profile ({exc})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise EngramInputError(f"{path} is not an Engram row profile (a bare numpy array)")
    return data
