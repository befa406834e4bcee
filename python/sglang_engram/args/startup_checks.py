"""Startup checks of the Engram flags, run in the launcher before anything loads.

Errors raise :class:`EngramStartupError` with one sentence naming the flag, the
value and the fix; things that still allow serving log one warning.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
from pathlib import Path

from engram.errors import EngramConfigError, EngramError
from engram.files import GIB, nearest_existing
from sglang_engram.protocol.family import HfConfig, ModelFamily
from sglang_engram.protocol.option_rules import check
from sglang_engram.protocol.runtime import EngramRuntime, TableState
from sglang_engram.protocol.server_config import EngramServerConfig

logger = logging.getLogger(__name__)


class EngramStartupError(EngramConfigError):
    """The Engram flags cannot work with this model or machine."""


def check_startup(
    runtime: EngramRuntime,
    config: EngramServerConfig,
    *,
    model_path: str | None,
    tp_size: int = 1,
    tokenizer_path: str | None = None,
) -> None:
    """Raise :class:`EngramStartupError` for unusable flags; log the warnings.
    ``tokenizer_path``: the server's (default ``model_path``), for the seed profile."""
    facts = runtime.model_facts(model_path)
    hf_config, family, placement = facts.hf_config, facts.family, config.placement
    tables = hf_config is None or facts.serves_tables
    try:
        warnings = check(config.option_values(), flags=True, tables=tables, role=config.role)
    except EngramConfigError as exc:
        raise EngramStartupError(str(exc)) from None
    if placement.files and model_path and hf_config is None:
        raise EngramStartupError(
            f"--engram-offload {placement.name} converts the tables from the checkpoint's "
            f"files, but {model_path} is not a local directory with a config.json; download the "
            "model first (huggingface-cli download ORG/NAME --local-dir DIR) and pass "
            "--model-path DIR"
        )
    if family is not None and hf_config is not None:
        try:
            # NOTE: the request guard's limits, asked here so that a config that cannot
            # state them stops the launch instead of the first request
            family.request_limits(hf_config)
        except EngramConfigError as exc:
            raise EngramStartupError(f"{family.title}: {exc}") from exc
    if not tables:
        if config.offload_explicit or config.ssd_dir or config.hot_cache_gb:
            logger.warning(_ignored_flags(model_path, family, config))
        return
    if family is not None and hf_config is not None:
        try:
            family.check_config(hf_config, config)
        except EngramConfigError as exc:
            raise EngramStartupError(str(exc)) from exc
    for warning in warnings:
        logger.warning(warning)
    if placement.files:
        check_ssd_dir(runtime.tables, config.ssd_dir, family, hf_config, model_path, tp_size)
    if placement.seeds and config.seed_profile is not None:
        check_seed_profile(config.seed_profile, hf_config, model_path, tokenizer_path)
    if placement.seeds and config.profile_out is not None:
        check_profile_out(config.profile_out, hf_config, model_path, tokenizer_path)
    if placement.hot_cache and config.hot_cache_gb:
        check_hot_cache_fits(config.hot_cache_gb, free_gpu_bytes())


def _ignored_flags(
    model_path: str | None, family: ModelFamily | None, config: EngramServerConfig
) -> str:
    if family is None:
        return (
            f"--engram-* flags ignored: {model_path} has no Engram layers (its config.json "
            "declares no n-gram tables of a family the plugin serves); serving it normally"
        )
    return (
        f"--engram-* flags ignored: {model_path} is {family.title}, whose {family.tables} "
        f"is served by {family.implementation(config)}; serving it normally"
    )


def check_seed_profile(
    profile: str, hf_config: HfConfig | None, model_path: str | None, tokenizer_path: str | None
) -> None:
    """The profile must count rows through the served model's hash: its tokenizer, and
    per Engram (or PLE) layer its table's row count and hash constants."""
    from engram.profile import HashIdentity, profile_hash, read_header

    flag = f"--engram-seed-profile {profile}"
    if hf_config is None:
        raise EngramStartupError(f"{flag}: {model_path} has no config.json to check it against")
    try:
        profiled = HashIdentity.from_json(read_header(profile)["identity"])
        tokenizer = tokenizer_path or model_path
        _, served = profile_hash(Path(str(model_path)), hf_config, tokenizer)
    except (EngramError, OSError, ValueError) as exc:  # NOTE: OSError: transformers' loading
        raise EngramStartupError(f"{flag}: {exc}") from exc
    why = profiled.mismatch(served)
    if why is not None:
        raise EngramStartupError(
            f"{flag} was not made for {model_path}: {why}; profile a corpus with this model "
            f"(python -m engram.profile {model_path} CORPUS --out PROFILE)"
        )


def check_profile_out(
    path: str, hf_config: HfConfig | None, model_path: str | None, tokenizer_path: str | None
) -> None:
    """The served profile needs a file it can write and a model whose hash a profile
    names (its identity is built here once, as the tables build it)."""
    from engram.profile import profile_hash

    flag = f"--engram-profile-out {path}"
    target = Path(path)
    if target.is_dir():
        raise EngramStartupError(f"{flag} is a directory; give a file name")
    base = nearest_existing(target.parent)
    if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
        raise EngramStartupError(f"{flag} cannot be written: {base} is not a writable directory")
    if hf_config is None:
        raise EngramStartupError(f"{flag}: {model_path} has no config.json to profile it by")
    try:
        profile_hash(Path(str(model_path)), hf_config, tokenizer_path or model_path)
    except (EngramError, OSError, ValueError) as exc:  # NOTE: OSError: transformers' loading
        raise EngramStartupError(f"{flag}: {exc}") from exc


def check_ssd_dir(
    tables: TableState,
    ssd_dir: str | None,
    family: ModelFamily | None,
    hf_config: HfConfig | None,
    model_path: str | None = None,
    tp_size: int = 1,
) -> None:
    """The ssd placement needs a writable directory with room for every table (each TP
    rank's shard of it when ``tp_size > 1``); ``option_rules.check`` saw it given."""
    assert ssd_dir, "option_rules.check: the placement needs --engram-ssd-dir"
    path = Path(ssd_dir)
    if path.exists() and not path.is_dir():
        raise EngramStartupError(f"--engram-ssd-dir {ssd_dir} exists and is not a directory")
    # NOTE: the write test goes to the directory, or to the closest folder that exists
    # (where it would be created): nothing is created here, so a start that fails
    # later leaves no empty directory behind. The tables create it when they convert.
    base = nearest_existing(path)
    try:
        if not base.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{base} is a file")
        with tempfile.NamedTemporaryFile(dir=base, prefix=".engram-write-test"):
            pass
    except OSError as exc:
        raise EngramStartupError(
            f"--engram-ssd-dir {ssd_dir} is not writable ({exc.strerror or exc}); "
            "choose a directory this user can write"
        ) from exc
    if family is None or hf_config is None:
        return
    from sglang_engram.tables.ssd_dirs import space_needed

    try:
        # NOTE: need and have in the same units: page-padded bytes on disk, for the
        # tables the table open will (re)convert; outdated ones stay until then.
        needed, stale = space_needed(tables, path, family, hf_config, model_path, tp_size)
    except EngramError as exc:
        raise EngramStartupError(str(exc)) from exc
    free = shutil.disk_usage(base).free
    if needed > free:
        kept = (
            f" ({stale / GIB:.2f} GiB of outdated tables are removed only once their "
            "replacements are complete)"
            if stale
            else ""
        )
        raise EngramStartupError(
            f"--engram-ssd-dir {ssd_dir} has {free / GIB:.2f} GiB free{kept} but the Engram "
            f"tables need {needed / GIB:.2f} GiB more ({needed:,} bytes on disk); free "
            "space or choose a larger disk"
        )


def free_gpu_bytes() -> int | None:
    """Free memory of this machine's first visible GPU via NVML (no CUDA context)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: no NVIDIA GPU or driver here
        return None
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
        handle = (
            pynvml.nvmlDeviceGetHandleByIndex(int(visible))
            if visible.isdigit()
            else pynvml.nvmlDeviceGetHandleByUUID(visible)
        )
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).free)
    except Exception:  # noqa: BLE001
        return None
    finally:
        pynvml.nvmlShutdown()


def check_hot_cache_fits(hot_cache_gb: float, free_bytes: int | None) -> None:
    """The hot-row cache must fit in the GPU's free memory (unknown: checked later)."""
    if free_bytes is None:
        return
    if hot_cache_gb * GIB > free_bytes:
        raise EngramStartupError(
            f"--engram-hot-cache-gb {hot_cache_gb:g} is larger than the GPU's free memory "
            f"({free_bytes / GIB:.2f} GiB); the cache shares the GPU with the weights "
            "and the KV cache, so choose a fraction of that"
        )
