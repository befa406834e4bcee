"""``python -m engram.profile`` run as a user runs it, in its own process, for tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_profile(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m engram.profile ARGS`` from the checkout's root; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "engram.profile", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
