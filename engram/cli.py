"""The command lines' one way to fail, shared by every CLI of the project.

- Bad input is one line on stderr, ``error: <what>, <where>, <what to do>``, and exit 2;
  a failure at run time (a full disk, a server that died) is the same line with exit 1.
- A traceback appears only with ``--debug`` (every :class:`Parser` and subcommand has it).
- A reader that closes the pipe (``... --json | head``) ends the command quietly.
- ``--help`` shows every option's default; :func:`number` range-checks numeric options, and
  :mod:`engram.cli_paths` path options.

Imports nothing heavy: a CLI fails on bad flags before torch or SGLang loads.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from engram.errors import EngramError, EngramInputError, EngramRunError

USAGE = 2
FAILED = 1
INTERRUPTED = 130
# NOTE: the status a shell reports for a process that SIGPIPE ended (128 + 13), as `cat`
# in `cat big | head` gives; the command stops writing and says nothing.
BROKEN_PIPE = 141
# OS errors that are the machine's doing rather than a wrong path or permission.
_RUNTIME_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM}


class _DefaultsFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help unless the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "default" not in text.lower()
            and shows_default(action)
            and (action.option_strings or action.nargs in ("?", "*"))
        ):
            text += " (default: %(default)s)"
        return text


def shows_default(action: argparse.Action) -> bool:
    """Whether ``--help`` should state the action's default (a flag's False and an
    absent None say nothing; 0 does)."""
    default = action.default
    return not (default is None or default is False or default is argparse.SUPPRESS)


class RawDescriptionFormatter(_DefaultsFormatter, argparse.RawDescriptionHelpFormatter):
    """For parsers whose description is laid out by hand."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line (exit 2), with ``--debug``
    on it and on each of its subcommands, and every default shown in ``--help``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)
        # NOTE: SUPPRESS, not False: a subcommand's default would overwrite the value that
        # `--debug` before the subcommand set. Read it with debug_of(args).
        self.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help="show the traceback of an error instead of one line",
        )

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(USAGE, f"error: {_one_line(message)}; see {self.prog} --help\n")


def debug_of(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "debug", False))


def number(
    kind: type[int] | type[float] = int,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
    power_of_two: bool = False,
) -> Callable[[str], Any]:
    """An argparse ``type`` that parses ``kind`` and checks its range (finite always)."""
    bounds = [
        f"{op} {bound:g}"
        for op, bound in ((">=", at_least), (">", above), ("<=", at_most), ("<", below))
        if bound is not None
    ]
    what = ("a power of two" if power_of_two else "a whole number") if kind is int else "a number"
    want = " ".join([what, " and ".join(bounds)]).strip()

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        ok = value is not None and math.isfinite(value)
        ok = ok and (at_least is None or value >= at_least) and (above is None or value > above)
        ok = ok and (at_most is None or value <= at_most) and (below is None or value < below)
        if ok and power_of_two:
            ok = value > 0 and not value & (value - 1)
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {want}, not {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def run(
    body: Callable[[], int | None],
    args: argparse.Namespace,
    *,
    usage: tuple[type[BaseException], ...] = (),
    runtime: tuple[type[BaseException], ...] = (),
    interrupted: str = "interrupted",
) -> int:
    """Run a command's ``body`` and turn what it raises into one line and an exit code:
    ``usage`` errors exit 2, then ``runtime`` errors and :class:`EngramRunError` 1 (so a
    usage subclass of a runtime error is usage), every other :class:`EngramError` 2, OS errors 2 (1 for a full disk or
    an I/O error), anything else 1 as an unexpected error. With ``--debug`` errors
    propagate with their traceback."""
    debug = debug_of(args)
    ctrl_c = _CtrlC()
    try:
        with ctrl_c:
            code = body() or 0
            sys.stdout.flush()  # NOTE: a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        _stdout_to_devnull()
        return BROKEN_PIPE
    except KeyboardInterrupt:
        if debug:
            raise
        say(interrupted)
        return INTERRUPTED
    except Exception as exc:
        if debug:
            raise
        if ctrl_c.pressed:
            # NOTE: some C code turns the KeyboardInterrupt it was handed into another
            # error (torch building a tensor says "could not determine the shape of object
            # type 'torch.storage.UntypedStorage'"); after a Ctrl-C it is still the Ctrl-C.
            say(interrupted)
            return INTERRUPTED
        code, text = describe(exc, usage, runtime)
        say(f"error: {text}")
        return code


class _CtrlC:
    """While entered, notes whether SIGINT arrived (and raises KeyboardInterrupt as
    Python's own handler does). Only in the main thread, and only over Python's default
    handler: a command that installed its own keeps it."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def __enter__(self) -> _CtrlC:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def describe(
    exc: BaseException,
    usage: tuple[type[BaseException], ...] = (),
    runtime: tuple[type[BaseException], ...] = (),
) -> tuple[int, str]:
    """The exit code and the one-line message for ``exc``."""
    if isinstance(exc, usage):
        return USAGE, _one_line(str(exc))
    if isinstance(exc, (EngramRunError, *runtime)):
        return FAILED, _one_line(str(exc))
    if isinstance(exc, EngramError):
        return USAGE, _one_line(str(exc))
    if isinstance(exc, OSError):
        return _os_error(exc)
    return FAILED, _one_line(
        f"unexpected {type(exc).__name__}: {exc}; rerun with --debug to see where, and report it"
    )


def _os_error(exc: OSError) -> tuple[int, str]:
    what = exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in _RUNTIME_ERRNOS:
        return FAILED, _one_line(f"{what}{where}; free space or fix the disk, then run again")
    hint = {
        errno.ENOENT: "check the path",
        errno.EACCES: "choose a path this user may use",
        errno.EPERM: "choose a path this user may use",
        errno.EROFS: "choose a writable location",
        errno.EISDIR: "give a file, not a directory",
        errno.ENOTDIR: "a part of the path is a file, not a directory",
    }.get(exc.errno or 0, "check the path and its permissions")
    return USAGE, _one_line(f"{what}{where}; {hint}")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null so that the flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # NOTE: stdout has no file descriptor (captured)
        pass


def torch_device(requested: str | None) -> str:
    """The ``--device`` of a CLI: ``requested``, checked, or cuda when present, else cpu."""
    import torch

    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise EngramInputError(
            f"--device {requested!r} is not a device torch knows; pass cpu or cuda"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise EngramInputError(
            f"--device {requested}: torch sees no CUDA or ROCm GPU here; pass --device cpu"
        )
    if device.type not in ("cpu", "cuda"):
        raise EngramInputError(f"--device {requested}: only cpu and cuda are supported")
    return requested
