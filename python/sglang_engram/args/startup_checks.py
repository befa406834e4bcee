"""Startup checks of the Engram flags, run in the launcher before anything loads.

Errors raise :class:`EngramStartupError` with one sentence naming the flag, the
value and the fix; things that still allow serving log one warning.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path

from engram.errors import EngramConfigError, EngramError
from engram.files import GIB, nearest_existing
from sglang_engram.protocol.family import HfConfig, ModelFamily
from sglang_engram.protocol.runtime import EngramRuntime, TableState
from sglang_engram.protocol.server_config import EngramServerConfig

logger = logging.getLogger(__name__)


def off_warning(role_name: str) -> str:
    """What ``off`` costs where a prompt's KV cache is computed: a prefill worker or a
    single server."""
    return (
        f"--engram-offload off on a {role_name}: the n-gram tables are not loaded, so every "
        "prompt is processed without the model's n-gram memory and the KV cache differs from "
        "what the trained model computes (lower quality output). Use off on decode workers "
        "only, or hbm/dram/ssd here."
    )


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
    _check_numbers(config)
    _check_read(config)
    _check_seed_placement(config)
    _check_profile_out_placement(config)
    facts = runtime.model_facts(model_path)
    hf_config, family = facts.hf_config, facts.family
    if config.offload == "ssd" and model_path and hf_config is None:
        raise EngramStartupError(
            f"--engram-offload ssd converts the tables from the checkpoint's files, but "
            f"{model_path} is not a local directory with a config.json; download the "
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
    if hf_config is not None and not facts.serves_tables:
        if config.offload_explicit or config.ssd_dir or config.hot_cache_gb:
            logger.warning(_ignored_flags(model_path, family, config))
        return
    if family is not None and hf_config is not None:
        try:
            family.check_config(hf_config, config)
        except EngramConfigError as exc:
            raise EngramStartupError(str(exc)) from exc
    if config.offload == "ssd":
        check_ssd_dir(runtime.tables, config.ssd_dir, family, hf_config, model_path, tp_size)
        if config.seed_profile is not None:
            check_seed_profile(config.seed_profile, hf_config, model_path, tokenizer_path)
        if config.profile_out is not None:
            check_profile_out(config.profile_out, hf_config, model_path, tokenizer_path)
    elif config.ssd_dir:
        logger.warning("--engram-ssd-dir is ignored with --engram-offload %s", config.offload)
    if config.ssd_read is not None and config.offload != "ssd":
        logger.warning("--engram-ssd-read is ignored with --engram-offload %s", config.offload)
    if config.ram_cache_gb is not None and config.offload != "ssd":
        logger.warning(
            "--engram-ram-cache-gb is ignored with --engram-offload %s (it caches rows of "
            "ssd tables only)",
            config.offload,
        )
    if config.hot_cache_gb and config.offload not in ("dram", "ssd"):
        logger.warning(
            "--engram-hot-cache-gb is ignored with --engram-offload %s (it caches rows "
            "of dram and ssd tables only)",
            config.offload,
        )
    elif config.hot_cache_gb:
        check_hot_cache_fits(config.hot_cache_gb, free_gpu_bytes())
    if config.role != "decode" and not config.enabled:
        logger.warning(off_warning(config.role_name))


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


def _check_numbers(config: EngramServerConfig) -> None:
    for flag, value in (
        ("--engram-hot-cache-gb", config.hot_cache_gb),
        ("--engram-ram-cache-gb", config.ram_cache_gb),
    ):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise EngramStartupError(f"{flag} must be >= 0, got {value:g}")


def _check_read(config: EngramServerConfig) -> None:
    from engram.ssd.readers import reader_names

    if config.ssd_read is not None and config.ssd_read not in reader_names():
        raise EngramStartupError(
            f"--engram-ssd-read must be one of {', '.join(reader_names())}, got {config.ssd_read!r}"
        )


def _check_seed_placement(config: EngramServerConfig) -> None:
    if config.seed_profile is None:
        return
    flag = f"--engram-seed-profile {config.seed_profile}"
    if config.offload != "ssd":
        raise EngramStartupError(
            f"{flag} seeds the RAM cache of ssd tables, but this server's placement is "
            f"{config.offload}; pass --engram-offload ssd or leave the profile out"
        )
    if config.ram_cache_bytes == 0:
        raise EngramStartupError(
            f"{flag}: --engram-ram-cache-gb {config.ram_cache_gb:g} leaves no RAM cache to "
            "seed; give the cache some memory or leave the profile out"
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


def _check_profile_out_placement(config: EngramServerConfig) -> None:
    if config.profile_out is not None and config.offload != "ssd":
        raise EngramStartupError(
            f"--engram-profile-out {config.profile_out} writes the rows ssd tables served, "
            f"but this server's placement is {config.offload}; pass --engram-offload ssd or "
            "leave it out"
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
    rank's shard of it when ``tp_size > 1``)."""
    if not ssd_dir:
        raise EngramStartupError(
            "--engram-offload ssd needs --engram-ssd-dir PATH (a directory on a local "
            "SSD where the tables are converted on first start)"
        )
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
