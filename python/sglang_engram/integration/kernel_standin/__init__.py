"""The ``sgl_kernel`` stand-in that lets stock SGLang serve on its CPU engine.

SGLang 0.5.23 imports ``sgl_kernel`` at module level on every platform, but the PyPI
wheel is CUDA-only (it needs ``libcuda.so.1``) and SGLang's CPU build of it is not on
the package index. :func:`install_if_needed` runs in ``register()``, before SGLang's
first import of it: on a machine with no GPU where the real package cannot load, it puts
the stand-in (``kernel_standin/sgl_kernel``: plain-torch versions of the few CPU ops a
``qwen4_exp`` model calls, in :mod:`.ops`; every other op raises, naming itself) in
front of it, for this process and, through ``PYTHONPATH``, for every process SGLang
starts. Anywhere else it does nothing, so nothing changes on a GPU machine.
"""

from __future__ import annotations

import glob
import importlib
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sglang_engram.integration.kernel_standin.ops import STANDIN_OPS
from sglang_engram.protocol.runtime import EngramRuntime

logger = logging.getLogger(__name__)

# NOTE: the directory holding the stand-in package ``sgl_kernel``; children find it
# first on PYTHONPATH. The variable below carries why it is used (and that it is).
STANDIN_DIR = Path(__file__).resolve().parent
ENV_VAR = "SGLANG_ENGRAM_KERNEL_STANDIN"
_GPU_DEVICE_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


@dataclass(frozen=True)
class KernelStatus:
    """Which ``sgl_kernel`` this process imports, and why."""

    standin: bool
    detail: str

    def describe(self) -> str:
        if not self.standin:
            return f"sgl_kernel: {self.detail}"
        return (
            f"sgl_kernel: STAND-IN (plain-torch stand-ins for {len(STANDIN_OPS)} CPU ops: "
            f"{', '.join(STANDIN_OPS)}; every other op raises): {self.detail}; "
            "SGLang's CPU engine serves with these"
        )


def gpu_present() -> bool:
    """A CUDA, ROCm or WSL GPU device node exists (read without importing torch)."""
    return any(glob.glob(pattern) for pattern in _GPU_DEVICE_NODES)


def install_if_needed(runtime: EngramRuntime) -> KernelStatus:
    """Use the stand-in when no GPU is present and the real ``sgl_kernel`` cannot load
    (decided once per process; the runtime holds the answer)."""
    if runtime.kernel is None:
        runtime.kernel = _decide()
    return runtime.kernel


def _decide() -> KernelStatus:
    inherited = os.environ.get(ENV_VAR)
    module = sys.modules.get("sgl_kernel")
    if module is not None:
        # already imported: by SGLang (a scheduler process finds the stand-in first on
        # the PYTHONPATH its launcher set) or by the user
        if getattr(module, "STANDIN", False):
            return KernelStatus(True, inherited or "installed by the launcher")
        return KernelStatus(False, "the real package")
    if inherited:
        return _install(inherited)
    if gpu_present():
        return KernelStatus(False, "a GPU is present: the real package, untouched")
    return _try_real()


def status(runtime: EngramRuntime) -> KernelStatus:
    """What :func:`install_if_needed` decided (deciding now if it has not run)."""
    return install_if_needed(runtime)


def standin_loaded() -> bool:
    """Whether the ``sgl_kernel`` this process imported is the stand-in."""
    return bool(getattr(sys.modules.get("sgl_kernel"), "STANDIN", False))


def _try_real() -> KernelStatus:
    try:
        importlib.import_module("sgl_kernel")
    except (ImportError, OSError) as exc:
        why = f"no GPU, and the real sgl_kernel cannot load ({_first_line(exc)})"
        return _install(why)
    return KernelStatus(False, "the real package (it loads without a GPU)")


def _install(why: str) -> KernelStatus:
    for name in [n for n in sys.modules if n == "sgl_kernel" or n.startswith("sgl_kernel.")]:
        del sys.modules[name]  # a failed import leaves its submodules behind
    os.environ[ENV_VAR] = why
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(STANDIN_DIR) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(STANDIN_DIR), *paths])
    if str(STANDIN_DIR) not in sys.path:
        sys.path.insert(0, str(STANDIN_DIR))
    importlib.invalidate_caches()
    module = importlib.import_module("sgl_kernel")
    assert getattr(module, "STANDIN", False), module
    logger.warning(
        "sglang-engram: sgl_kernel is a STAND-IN here: %s; plain-torch stand-ins for %s",
        why,
        ", ".join(STANDIN_OPS),
    )
    return KernelStatus(True, why)


def _first_line(exc: BaseException) -> str:
    """The line of an import error that says why (sgl_kernel's spans twenty lines)."""
    lines = [ln.strip(" -") for ln in str(exc).splitlines() if ln.strip(" -")]
    cause = [ln for ln in lines if "libcuda" in ln or "cannot open" in ln]
    return (cause or lines or [type(exc).__name__])[-1 if cause else 0]
