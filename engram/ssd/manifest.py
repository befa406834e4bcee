"""The manifests that describe SSD tables.

A table directory's ``manifest.json`` records the layout (rows, row width, row and page
sizes), the row format (:mod:`engram.row_formats`: its name and parameters, such as a
per-table scale; a manifest without one is ``e4m3-ue8m0``, as every table written
before row formats existed), the dtypes, the data file's size, a crc32 per chunk, a
digest of those crcs (``table_digest``, which identifies the content), the digest of the per-block hashes
file (:mod:`engram.ssd.block_hashes`) and the identity of the source the rows came
from. A converted checkpoint directory has its own ``manifest.json`` naming its
per-layer table directories. A manifest is written last (atomically), so a directory
without one is never a finished table.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engram.errors import EngramTableError
from engram.row_formats import DEFAULT_ROW_FORMAT, RowFormat, row_format, row_format_class
from engram.ssd.block_hashes import HASH_NAME, HASHES_FILE
from engram.ssd.layout import PAGE_BYTES, DiskLayout

MANIFEST = "manifest.json"
DATA_FILE = "rows.bin"
TABLE_FORMAT = "engram-ssd-table"
CHECKPOINT_FORMAT = "engram-ssd-checkpoint"
# NOTE: version 2 added the per-block hashes; a version-1 table is converted again.
FORMAT_VERSION = 2
CHECKPOINT_VERSION = 1


@dataclass(frozen=True)
class TableManifest:
    num_rows: int
    head_dim: int
    chunk_blocks: int
    chunk_crc32: tuple[int, ...]
    source: dict[str, Any]
    row_bytes: int = 0
    rows_per_block: int = 0
    block_bytes: int = 0
    page_bytes: int = PAGE_BYTES
    data_file: str = DATA_FILE
    data_bytes: int = 0
    weight_dtype: str = row_format_class(DEFAULT_ROW_FORMAT).weight_dtype
    scale_dtype: str = row_format_class(DEFAULT_ROW_FORMAT).scale_dtype
    row_format_name: str = DEFAULT_ROW_FORMAT
    row_format_params: dict[str, Any] = field(default_factory=dict)
    format: str = TABLE_FORMAT
    version: int = FORMAT_VERSION
    table_digest: str = ""
    block_hash: str = HASH_NAME
    block_hashes_file: str = HASHES_FILE
    block_hashes_digest: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        layout: DiskLayout,
        crcs: list[int],
        source: dict[str, Any],
        block_digest: str,
        rows: RowFormat,
    ) -> TableManifest:
        """The manifest of a table of ``rows``-format rows written in ``layout``."""
        return cls(
            num_rows=layout.num_rows,
            head_dim=layout.head_dim,
            chunk_blocks=layout.chunk_blocks,
            chunk_crc32=tuple(crcs),
            source=source,
            row_bytes=layout.row_bytes,
            rows_per_block=layout.rows_per_block,
            block_bytes=layout.block_bytes,
            data_bytes=layout.file_bytes,
            weight_dtype=rows.weight_dtype,
            scale_dtype=rows.scale_dtype,
            row_format_name=rows.name,
            row_format_params=rows.params(),
            table_digest=digest_of(layout, crcs, rows.params()),
            block_hashes_digest=block_digest,
        )

    @property
    def layout(self) -> DiskLayout:
        return DiskLayout(self.num_rows, self.head_dim, self.chunk_blocks, self.row_format_name)

    @property
    def row_format(self) -> RowFormat:
        """How this table's rows become bf16."""
        return row_format(self.row_format_name, self.head_dim, self.row_format_params)

    def to_json(self) -> str:
        data = asdict(self)
        data["chunk_crc32"] = list(self.chunk_crc32)
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def load(cls, directory: Path) -> TableManifest:
        """Read and check ``directory/manifest.json``; raise naming what is wrong."""
        data = _read_json(directory / MANIFEST, "SSD table")
        if data.get("format") != TABLE_FORMAT:
            raise EngramTableError(
                f"{directory / MANIFEST} is not an Engram SSD table manifest "
                f"(format {data.get('format')!r})"
            )
        if data.get("version") != FORMAT_VERSION:
            raise EngramTableError(
                f"{directory / MANIFEST} has format version {data.get('version')}; this "
                f"build reads version {FORMAT_VERSION}: convert the checkpoint again"
            )
        try:
            data["chunk_crc32"] = tuple(int(c) for c in data["chunk_crc32"])
            manifest = cls(**data)
        except (KeyError, TypeError, ValueError) as err:
            raise EngramTableError(f"{directory / MANIFEST} is malformed: {err}") from err
        manifest.check_consistent(directory)
        return manifest

    def check_consistent(self, directory: Path) -> None:
        where = directory / MANIFEST
        layout = self.layout
        derived = {
            "row_bytes": layout.row_bytes,
            "rows_per_block": layout.rows_per_block,
            "block_bytes": layout.block_bytes,
            "data_bytes": layout.file_bytes,
            "page_bytes": PAGE_BYTES,
        }
        for name, want in derived.items():
            if getattr(self, name) != want:
                raise EngramTableError(
                    f"{where}: {name} is {getattr(self, name)} but the layout implies {want}"
                )
        if (self.block_hash, self.block_hashes_file) != (HASH_NAME, HASHES_FILE):
            raise EngramTableError(
                f"{where}: block hashes are {self.block_hash} in {self.block_hashes_file}; "
                f"this build checks {HASH_NAME} in {HASHES_FILE}"
            )
        rows = self.row_format
        if (self.weight_dtype, self.scale_dtype) != (rows.weight_dtype, rows.scale_dtype):
            raise EngramTableError(
                f"{where}: table dtypes are {self.weight_dtype}/{self.scale_dtype}, "
                f"{rows.name} rows are {rows.weight_dtype}/{rows.scale_dtype}"
            )
        if len(self.chunk_crc32) != layout.num_chunks:
            raise EngramTableError(
                f"{where}: {len(self.chunk_crc32)} chunk checksums for {layout.num_chunks} chunks"
            )
        if self.table_digest != digest_of(layout, list(self.chunk_crc32), rows.params()):
            raise EngramTableError(f"{where}: table_digest does not match its chunk checksums")


@dataclass(frozen=True)
class CheckpointManifest:
    """A converted checkpoint: one table directory per layer (each table's manifest
    records the rows it was written from)."""

    layers: dict[str, str]
    format: str = CHECKPOINT_FORMAT
    version: int = CHECKPOINT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def load(cls, directory: Path) -> CheckpointManifest:
        data = _read_json(directory / MANIFEST, "converted checkpoint")
        if data.get("format") != CHECKPOINT_FORMAT or data.get("version") != CHECKPOINT_VERSION:
            raise EngramTableError(
                f"{directory / MANIFEST} is not a version-{CHECKPOINT_VERSION} converted "
                f"Engram checkpoint (format {data.get('format')!r}, version {data.get('version')})"
            )
        return cls(layers={str(k): v for k, v in data["layers"].items()})


def digest_of(layout: DiskLayout, crcs: list[int], params: dict[str, Any]) -> str:
    """The digest of a table's layout, row format parameters and chunk crcs."""
    h = hashlib.blake2b(digest_size=16)
    # NOTE: an e4m3-ue8m0 table hashes exactly what earlier builds hashed (its key is
    # theirs and it has no parameters), so their manifests keep checking.
    keyed = [*layout.key, *(f"{k}={v}" for k, v in sorted(params.items()))]
    h.update("".join(f"{part}:" for part in keyed).encode())
    h.update(b"".join(int(c).to_bytes(4, "little") for c in crcs))
    return h.hexdigest()


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.exists():
        raise EngramTableError(f"{what} manifest {path} is missing")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise EngramTableError(f"{what} manifest {path} is unreadable: {err}") from err
