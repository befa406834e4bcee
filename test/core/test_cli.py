"""The shared command-line behaviour (``engram.cli``): every default in ``--help``,
range-checked numbers, ``--debug`` tracebacks, quiet broken pipes, Ctrl-C in one line."""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sglang_engram.__main__ import parser as doctor_parser
from sglang_engram.args.flags import add_engram_args
from sglang_engram.cluster.cli import _parser as cluster_parser
from sglang_engram.compare.__main__ import _parser as compare_parser

from engram.cli import Parser, number, run, shows_default
from engram.convert import build_parser as convert_parser
from engram.eval.__main__ import parser as eval_parser
from engram.model.__main__ import parser as model_parser
from engram.profile.__main__ import build_merge_parser as profile_merge_parser
from engram.profile.__main__ import build_parser as profile_parser
from test.core.test_cli_errors import ROOT, run_cli


def _engram_flags() -> argparse.ArgumentParser:
    parser = Parser(prog="launch_server")
    add_engram_args(parser)
    return parser


PARSERS = {
    "engram.model": model_parser,
    "engram.eval": eval_parser,
    "engram.convert": convert_parser,
    "engram.profile": profile_parser,
    "engram.profile merge": profile_merge_parser,
    "sglang_engram.cluster": cluster_parser,
    "sglang_engram.compare": compare_parser,
    "sglang_engram": doctor_parser,
    "--engram-* flags": _engram_flags,
}


def _all(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _all(sub)
    return out


@pytest.mark.parametrize("name", PARSERS)
def test_help_states_every_default(name: str) -> None:
    for parser in _all(PARSERS[name]()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            text = formatter._expand_help(action) if action.help else ""
            flag = "/".join(action.option_strings) or action.dest
            assert text.strip(), f"{parser.prog} {flag} has no help"
            if shows_default(action):
                assert "default" in text, f"{parser.prog} {flag}: {text!r} hides its default"
    if name == "--engram-* flags":
        ram = next(a for a in _engram_flags()._actions if a.dest == "engram_ram_cache_gb")
        assert "(default 4; ssd only)" in ram.help


@pytest.mark.parametrize(
    ("make", "text", "value"),
    [
        (number(at_least=1), "3", 3),
        (number(float, above=0, below=1), "0.25", 0.25),
        (number(at_least=2, power_of_two=True), "8", 8),
        (number(float, at_least=0), "0", 0.0),
    ],
)
def test_number_accepts(make, text: str, value: float) -> None:
    assert make(text) == value


@pytest.mark.parametrize(
    ("make", "text", "message"),
    [
        (number(at_least=1), "0", "must be a whole number >= 1, not '0'"),
        (number(at_least=1), "2.5", "must be a whole number >= 1, not '2.5'"),
        (number(float, above=0, below=1), "1", "must be a number > 0 and < 1, not '1'"),
        (number(float, at_least=0), "nan", "must be a number >= 0, not 'nan'"),
        (number(float, at_least=0), "inf", "must be a number >= 0, not 'inf'"),
        (number(at_least=2, power_of_two=True), "6", "must be a power of two >= 2, not '6'"),
    ],
)
def test_number_refuses(make, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        make(text)
    assert str(exc.value) == message


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(tmp_path: Path, where: str) -> None:
    args = ["generate", "--model", str(tmp_path / "missing")]
    args = ["--debug", *args] if where == "before" else [*args, "--debug"]
    done = run_cli("engram.model", *args)
    assert done.returncode == 1  # an uncaught exception
    assert "Traceback" in done.stderr and "EngramConfigError: model directory" in done.stderr


def _with_closed_stdout(module: str, *args: str) -> tuple[int, str]:
    """Run with stdout a pipe nobody reads (its reader closed first, as `| head` ends)."""
    read, write = os.pipe()
    os.close(read)
    path = os.pathsep.join([str(ROOT), str(ROOT / "python"), str(ROOT / "sgl-kernel")])
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
    )
    os.close(write)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


@pytest.mark.parametrize(
    "command",
    [
        ("sglang_engram.cluster", "plan", str(ROOT / "examples/pd-cluster.yaml"), "--json",
         "--num-gpus", "2"),
        ("sglang_engram", "doctor", "--no-hooks", "--json"),
    ],
)  # fmt: skip
def test_a_closed_pipe_ends_quietly(command: tuple[str, ...]) -> None:
    code, err = _with_closed_stdout(*command)
    assert err == ""
    assert code == 141  # what a shell reports for a command SIGPIPE ended


def test_ctrl_c_is_one_line() -> None:
    path = os.pathsep.join([str(ROOT), str(ROOT / "python"), str(ROOT / "sgl-kernel")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.eval", "ablate", "--max-samples", "200", "--device", "cpu"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 300
    first = proc.stderr.readline()  # the progress bar's first line: the work has begun
    assert first.startswith("ablate:"), first
    assert time.monotonic() < deadline
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130
    assert "Traceback" not in rest
    assert rest.strip().splitlines()[-1] == "interrupted"


def test_ctrl_c_that_c_code_turned_into_another_error_is_still_ctrl_c(capsys) -> None:
    # torch, handed the KeyboardInterrupt while it builds a tensor, raises a ValueError
    # instead ("could not determine the shape of object type ..."): that is the Ctrl-C.
    def body() -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs here
        except KeyboardInterrupt:
            raise ValueError("could not determine the shape of object type 'X'") from None
        raise AssertionError("SIGINT did not arrive")

    assert run(body, argparse.Namespace(), interrupted="interrupted; resume") == 130
    assert capsys.readouterr().err == "interrupted; resume\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_the_same_error_without_ctrl_c_is_unexpected(capsys) -> None:
    def body() -> int:
        raise ValueError(f"shape {random.randrange(1000)}")

    assert run(body, argparse.Namespace()) == 1
    assert capsys.readouterr().err.startswith("error: unexpected ValueError: shape ")
