"""STAND-IN for ``sgl_kernel`` on a machine with no GPU where the real one cannot load.

Installed by :mod:`sglang_engram.integration.kernel_standin` (never on a GPU machine, never where the
real ``sgl_kernel`` imports). SGLang's modules import ``sgl_kernel`` at module level even
on its CPU engine, whose forward pass needs none of it for the tiny Engram model with
``--attention-backend torch_native``. This package lets those imports succeed: every
name, in ``sgl_kernel`` and in any ``sgl_kernel.*`` submodule, is an op that raises a
``RuntimeError`` naming itself when called; except that importing it registers the
plain-torch stand-ins of :mod:`sglang_engram.integration.kernel_standin.ops` as
``torch.ops.sgl_kernel.*`` (the CPU ops a ``qwen4_exp`` model calls), and
``sgl_kernel.mamba`` (a file here) wraps three of them as SGLang imports them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

from sglang_engram.integration.kernel_standin import ops as _ops

STANDIN = True
__version__ = "0.0.0+sglang-engram-standin"
# NOTE: set by sglang_engram.integration.kernel_standin when it installs this package; inherited by
# every process SGLang starts, so each error says why the real package is absent.
_WHY = os.environ.get("SGLANG_ENGRAM_KERNEL_STANDIN", "the real sgl_kernel cannot load here")


class StandinOp:
    """A kernel that is not there: calling it (or anything reached through it) raises."""

    def __init__(self, name: str):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"{self.__name__} was called, but sgl_kernel is sglang-engram's import-only "
            f"stand-in on this GPU-less machine ({_WHY}); this code path needs a GPU "
            "build of sgl_kernel"
        )

    def __getattr__(self, name: str) -> StandinOp:
        if name.startswith("__"):
            raise AttributeError(name)
        return StandinOp(f"{self.__name__}.{name}")

    def __repr__(self) -> str:
        return f"<sgl_kernel stand-in op {self.__name__}>"


class _StandinModule(types.ModuleType):
    def __getattr__(self, name: str) -> StandinOp:
        if name.startswith("__"):
            raise AttributeError(name)
        return StandinOp(f"{self.__name__}.{name}")


# NOTE: submodules that are files in this package (found by the normal path finder).
_FILE_SUBMODULES = ("mamba",)


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every other ``sgl_kernel.<anything>`` is a stand-in submodule."""

    def find_spec(self, fullname: str, path: object, target: object = None):
        if not fullname.startswith(__name__ + "."):
            return None
        if fullname.removeprefix(__name__ + ".") in _FILE_SUBMODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StandinModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []
        module.STANDIN = True


def __getattr__(name: str) -> StandinOp:
    if name.startswith("__"):
        raise AttributeError(name)
    return StandinOp(f"{__name__}.{name}")


__path__: list[str] = [os.path.dirname(os.path.abspath(__file__))]
STANDIN_OPS = _ops.register()
if not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _SubmoduleFinder())
