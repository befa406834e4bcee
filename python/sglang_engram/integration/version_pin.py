"""The SGLang release this plugin is written against, and the check of the installed one."""

from __future__ import annotations

import logging
from importlib import metadata

logger = logging.getLogger(__name__)

# NOTE: every hook target in hooks.py is a private name of this exact release; a test
# resolves each of them against the installed SGLang so a rename fails loudly in CI.
PINNED_SGLANG_VERSION = "0.5.23"


def installed_sglang_version() -> str | None:
    """The installed SGLang distribution's version, read without importing it."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def version_problem() -> str | None:
    """A sentence saying why the installed SGLang may not fit, or ``None`` if it does."""
    installed = installed_sglang_version()
    if installed is None:
        return "SGLang is not installed; the Engram plugin has nothing to hook"
    if installed != PINNED_SGLANG_VERSION:
        return (
            f"sglang-engram is pinned to SGLang {PINNED_SGLANG_VERSION} but "
            f"{installed} is installed; hooks whose targets moved are skipped "
            "(run `python -m sglang_engram doctor` to see which)"
        )
    return None
