"""What each table placement is, declared once: the traits the rest of the code asks.

A :class:`Placement` says what differs between placements (where the rows come from,
which caches and options it has, whether its lookups run host code); its table class
(``engram.tables``) says how. Neither this module nor its readers import torch, so a
spec file or a command line can be checked against the registered placements cheaply.

``engram.tables.register_placement(TableClass)`` registers a table class together with
its ``declaration`` (a :class:`Placement`): a new placement is its class and that one call.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram.errors import EngramConfigError


@dataclass(frozen=True)
class Placement:
    """One placement's traits (every one defaults to the plainest table: rows in memory)."""

    name: str
    # where the rows live, in a few words (the --engram-offload help lists it)
    summary: str
    # False: no table at all; the Engram layers leave their input unchanged
    holds_table: bool = True
    # True: built from the checkpoint's rows that the model loader reads; False: a loader
    # skips the table tensors (the placement reads its own files, or holds no rows)
    loads_rows: bool = True
    # True: the rows live in table files under a directory the placement needs
    files: bool = False
    # True: a host-memory cache of rows in front of the files
    ram_cache: bool = False
    # True: that RAM cache can be seeded from a row profile (and the rows its lookups
    # read can be written as one)
    seeds: bool = False
    # True: rows are read ahead of the lookup that needs them into the placement's buffers
    read_ahead: bool = False
    # True: a device-memory cache of hot rows can sit in front of the table
    hot_cache: bool = False
    # True: the rows sit in page-locked host memory that the device reads over UVA
    # (upstream's host tables serve this placement where a family leaves it to them)
    host_memory: bool = False
    # what the lookups do on the host that a replay of recorded device work would skip
    # (None: a lookup is device work only)
    host_lookup: str | None = None


HBM = Placement("hbm", "device memory (TP-sharded)")
DRAM = Placement("dram", "pinned host memory read over UVA", hot_cache=True, host_memory=True)
SSD = Placement(
    "ssd",
    "table files on a local disk, with a RAM cache in front",
    loads_rows=False,
    files=True,
    ram_cache=True,
    seeds=True,
    read_ahead=True,
    hot_cache=True,
    host_lookup="reads table files",
)
OFF = Placement(
    "off", "no table; Engram layers leave the residual unchanged", holds_table=False,
    loads_rows=False,
)  # fmt: skip

# NOTE: name -> declaration, in registration order (the order of the CLI choices).
DECLARED: dict[str, Placement] = {p.name: p for p in (HBM, DRAM, SSD, OFF)}


def declare(placement: Placement) -> None:
    DECLARED[placement.name] = placement


def placement_names() -> list[str]:
    return list(DECLARED)


def placement_named(name: str) -> Placement:
    found = DECLARED.get(name)
    if found is None:
        raise EngramConfigError(
            f"unknown Engram placement {name!r}; choose one of {', '.join(DECLARED)}"
        )
    return found


def having(trait: str) -> list[str]:
    """The names of the placements whose ``trait`` is set (truthy)."""
    return [p.name for p in DECLARED.values() if getattr(p, trait)]
