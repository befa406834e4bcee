"""The servers ``bench_serving_tiers.py`` compares: the model it builds, each config's
flags, whether they fit in memory at once, and starting them."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import psutil
from sglang_engram.protocol.server_config import engram_flags

from engram.model.builder import TRAINED_MODEL
from engram.model.tokenizer import ASSET
from engram_testing.client import settled_metrics
from engram_testing.server import sglang_server

# config -> its RAM cache as a share of the tables (an ssd config), or None
CONFIGS = {
    "dram": None,
    "ssd-1/16": 1 / 16,
    "ssd-1/16-seeded": 1 / 16,
    "ssd-1/4": 1 / 4,
    "off": None,
}
SEEDED_SUFFIX = "-seeded"  # NOTE: such a config starts with --engram-seed-profile
# NOTE: one tiny-model CPU server's memory besides its tables and cache (its scheduler,
# tokenizer and detokenizer processes: ~2.6 GiB measured, four servers at once on 24 GiB).
SERVER_GIB = 2.5
SEEDED_ROWS = "sglang:engram_ssd_seeded_rows_total"
SEED_SECONDS = "sglang:engram_ssd_seed_seconds_total"


# NOTE: the served model's backbone: the bundled trained one, which writes stdlib-like text
# (its decode rows are as predictable as a deployment's), or random weights (random tokens).
BACKBONES = {"text": "--text-backbone", "random": "--random"}
# NOTE: the tokenizer each build writes: the trained model's, or the asset of random builds.
BACKBONE_TOKENIZERS = {"text": TRAINED_MODEL, "random": ASSET}


def build_model(table_gib: float, out: Path, backbone: str = "text") -> Path:
    subprocess.run(
        [sys.executable, "-m", "engram.model", "build", BACKBONES[backbone], "--engram-table-gib",
         f"{table_gib:g}", "--out", str(out), "--reuse"],
        check=True,
    )  # fmt: skip
    return out


def tokenizer_of(model: Path, backbone: str) -> Path:
    """The tokenizer of ``model``: its own once built, else the one its build writes (so
    that prompts are counted before anything is built or started)."""
    return model if (model / "tokenizer.json").is_file() else BACKBONE_TOKENIZERS[backbone]


def seeded(name: str) -> bool:
    return name.endswith(SEEDED_SUFFIX)


def server_args(name: str, table_gib: float, ssd_dir: Path, profile: Path | None) -> list[str]:
    # NOTE: every config runs SGLang's default overlap scheduler (an ssd table reads the
    # next decode step's rows from the launched step's sampled tokens);
    # --sleep-on-idle: a CPU server otherwise spins a core while it waits its turn.
    fraction = CONFIGS[name]
    if fraction is None:
        return ["--sleep-on-idle", *engram_flags(offload=name)]
    assert profile is not None or not seeded(name), "a seeded config needs the profile built first"
    return ["--sleep-on-idle", *engram_flags(
        offload="ssd", ssd_dir=str(ssd_dir), ram_cache_gb=float(f"{table_gib * fraction:.6g}"),
        ssd_read="direct", seed_profile=str(profile) if seeded(name) else None,
    )]  # fmt: skip


def slug(name: str) -> str:
    return name.replace("/", "_")


def check_memory(configs: list[str], table_gib: float) -> str | None:
    """Why the servers would not fit in this machine's memory, or None."""
    need = sum(
        SERVER_GIB + table_gib * (CONFIGS[n] or (1.0 if n == "dram" else 0.0)) for n in configs
    )
    have = psutil.virtual_memory().available / 2**30
    if need <= have:
        return None
    return (
        f"error: the servers of {', '.join(configs)} need about {need:.1f} GiB of memory at "
        f"once, {have:.1f} GiB is available; pass fewer --configs or a smaller --table-gib"
    )


def start_servers(stack: ExitStack, configs: list[str], model: Path, args, work: Path) -> dict:
    """Every config's server, started at once (``check_memory`` said they fit; their
    starts, mostly imports and warmup, overlap); their URLs, in the order of ``configs``."""

    def start(name: str) -> str:
        flags = server_args(name, args.table_gib, args.ssd_dir, args.profile)
        print(f"[{name}] starting server: {' '.join(flags)}", flush=True)
        log = work / f"{slug(name)}.server.log"
        return stack.enter_context(sglang_server(model, *flags, log=log, timeout_s=1800))

    with ThreadPoolExecutor(len(configs)) as pool:
        started = {name: pool.submit(start, name) for name in configs}
        return {name: future.result() for name, future in started.items()}


def wait_seeded(url: str, timeout_s: float = 1800) -> dict[str, float]:
    """Once a seeded server's tables have seeded their RAM caches (the counters grew
    and settled): the rows seeded and the seconds it took, summed over the tables."""
    now = settled_metrics(url, wants={SEEDED_ROWS: 1}, timeout_s=timeout_s)
    return {"rows": now.get(SEEDED_ROWS, 0.0), "table_seconds": now.get(SEED_SECONDS, 0.0)}
