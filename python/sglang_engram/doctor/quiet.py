"""Keeping upstream's import-time chatter out of ``doctor``'s report.

Applying the hooks imports SGLang's model code, and with it transformers, torch and
Triton, which warn about this machine on the way (``UserWarning: Only CUDA, HIP and XPU
support AWQ currently``, ``Cannot detect CUDA architecture.``, ``Ignore import error
when loading sglang.srt.models.mamba``). None of it is about the plugin, and the report
already says what matters of it (no GPU, the ``sgl_kernel`` in use, a hook that failed).
:func:`upstream_quiet` drops, while it is held, Python warnings raised outside our own
packages and records below ERROR from the upstream loggers; ``doctor --debug`` skips it.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# the packages whose warnings and log records are ours: kept
OURS = ("engram", "engram_kernels", "sglang_engram")
# top-level loggers of what doctor imports (their children inherit the level)
UPSTREAM_LOGGERS = (
    "sglang",
    "transformers",
    "torch",
    "triton",
    "flashinfer",
    "numba",
    "urllib3",
    "datasets",
    "huggingface_hub",
)


class _OnlyOurs(logging.Filter):
    """Passes our records, and anyone's at ERROR or above."""

    def filter(self, record: logging.LogRecord) -> bool:
        top = record.name.split(".", 1)[0]
        return top in OURS or record.levelno >= logging.ERROR


@contextmanager
def upstream_quiet() -> Iterator[None]:
    """Upstream warnings and upstream log records below ERROR are dropped inside."""
    loggers = {name: logging.getLogger(name) for name in UPSTREAM_LOGGERS}
    levels = {name: logger.level for name, logger in loggers.items()}
    only_ours = _OnlyOurs()
    handlers = list(logging.getLogger().handlers)
    # NOTE: transformers sets its own logger's level from this the first time it logs,
    # which may be inside the block, after the level set below.
    verbosity = os.environ.get("TRANSFORMERS_VERBOSITY")
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    with warnings.catch_warnings():
        # NOTE: `module` is matched at the start of the warning's module name.
        warnings.filterwarnings("ignore", module=rf"(?!(?:{'|'.join(OURS)})(?:\.|$))")
        for logger in loggers.values():
            logger.setLevel(logging.ERROR)
        # NOTE: and on the root handlers, for loggers that set a level of their own
        for handler in handlers:
            handler.addFilter(only_ours)
        try:
            yield
        finally:
            for handler in handlers:
                handler.removeFilter(only_ours)
            for name, logger in loggers.items():
                logger.setLevel(levels[name])
            if verbosity is None:
                os.environ.pop("TRANSFORMERS_VERBOSITY", None)
            else:
                os.environ["TRANSFORMERS_VERBOSITY"] = verbosity
