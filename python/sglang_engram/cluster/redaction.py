"""Secrets kept out of a process's command line and its log: a private ``--config`` file
(YAML, only this user can read it) holding the flags that carry them, and the process's
output copied to its log with each secret replaced by ``<redacted>`` (SGLang logs its
whole configuration, keys included, as it starts)."""

from __future__ import annotations

import os
import tempfile
from typing import IO, Any

import yaml

REDACTED = b"<redacted>"


def private_config(name: str, flags: dict[str, Any]) -> str:
    """A new YAML file of ``flags`` (flag name without dashes -> value) for process
    ``name``, that only this user can read; the caller removes it."""
    fd, path = tempfile.mkstemp(prefix=f"sglang-engram-{name}-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:  # NOTE: mkstemp makes it 0600
        yaml.safe_dump(flags, f)
    return path


def redact(line: bytes, secrets: tuple[str, ...]) -> bytes:
    for secret in secrets:
        line = line.replace(secret.encode(), REDACTED)
    return line


def copy_redacted(pipe: IO[bytes], log_path: str, secrets: tuple[str, ...]) -> None:
    """The process's output, line by line, to its log, each secret redacted."""
    with pipe, open(log_path, "ab") as log:
        for line in pipe:
            log.write(redact(line, secrets))
            log.flush()
