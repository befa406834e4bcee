"""``python -m sglang_engram doctor`` as a user reads it: the report, not upstream's
import-time warnings around it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

from sglang_engram.doctor.quiet import upstream_quiet

# lines upstream SGLang, transformers and torch print while doctor imports them (seen on
# a machine without CUDA, where they are the most)
UPSTREAM_LINES = (
    "UserWarning",
    "warnings.warn(",
    "support AWQ currently",
    "support GGUF quantization",
    "Triton is not supported on current platform",
    "Cannot detect CUDA architecture",
    "Ignore import error when loading",
)


def test_doctor_prints_its_report_and_no_upstream_warnings() -> None:
    """stderr into stdout, as a terminal shows both: the first line is the report's own
    and no upstream warning appears anywhere."""
    run = subprocess.run(
        [sys.executable, "-m", "sglang_engram", "doctor"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "default"},  # NOTE: every warning, once each
    )
    assert run.returncode == 0, run.stdout[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("SGLang: 0.5.23 (pinned 0.5.23)"), run.stdout[:3000]
    assert lines[-1].startswith("advice: "), run.stdout[-3000:]
    assert [line for line in lines if any(s in line for s in UPSTREAM_LINES)] == []
    assert "hooks:" in lines


def _warn_from(module: str, message: str) -> None:
    """A warning as code of ``module`` raises it (as upstream's import-time ones are)."""
    warnings.warn_explicit(message, UserWarning, f"{module}.py", 1, module=module)


def test_quiet_drops_upstream_warnings_and_records_keeps_ours_and_errors() -> None:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    root.addHandler(handler)
    sglang_level = logging.getLogger("sglang").level
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with upstream_quiet():
                _warn_from("sglang.srt.layers.quantization.awq", "Only CUDA support AWQ")
                _warn_from("transformers.utils", "deprecated")
                _warn_from("sglang_engram.doctor.report", "ours")
                _warn_from("engram.tables.ssd", "ours too")
                logging.getLogger("sglang.srt.models.registry").warning("Ignore import error")
                logging.getLogger("sglang.kernels.jit.utils.arch").warning("Cannot detect CUDA")
                logging.getLogger("sglang.srt.models").error("upstream error")
                logging.getLogger("sglang_engram.doctor").warning("our warning")
            _warn_from("sglang.srt.layers.quantization.gguf", "after: shown again")
            logging.getLogger("sglang.srt.models.registry").warning("after: shown again")
        assert [str(w.message) for w in seen] == ["ours", "ours too", "after: shown again"]
        said = [r.getMessage() for r in records]
        assert said == ["upstream error", "our warning", "after: shown again"]
        assert logging.getLogger("sglang").level == sglang_level
        assert not handler.filters
    finally:
        root.removeHandler(handler)
