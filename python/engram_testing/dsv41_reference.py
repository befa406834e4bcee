"""Greedy tokens of a DeepSeek-V4.1 checkpoint from upstream SGLang's own model, run in
this process on SGLang's CPU engine (no server, no scheduler): upstream's
``ModelRunner`` with its DeepSeek-V4 pool and attention backend, driven prompt by prompt
as SGLang's one-batch benchmark drives it (one prefill, then one decode step per token),
with the Engram tables in ``hbm`` (upstream's ``EngramEmbedding``).

The regimes take Engram's contribution away by zeroing every Engram layer's ``wkv``
projection, which makes upstream's gate add exact zeros (the layer is the identity):
``both`` keeps it, ``none`` zeroes it before the prefill, ``prefill_only`` after the
prefill (a PD decode worker with ``--engram-offload off``). The reference for served
tokens; run in a fresh interpreter with ``SGLANG_USE_CPU_ENGINE=1``:

    python -m engram_testing.dsv41_reference MODEL PROMPTS.json --new-tokens N --regimes R,...

prints ``RESULT`` and a JSON object: regime -> each prompt's tokens. :func:`run` runs it
so from a test.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from engram.cli import Parser, number
from engram.cli import run as run_cli
from engram.cli_paths import directory, existing_file

REGIMES = ("both", "none", "prefill_only")
# NOTE: the KV pool; the sliding window's part must hold a window and a page per request
MAX_TOTAL_TOKENS = 8192


@contextlib.contextmanager
def _engram_removed(model: Any, removed: bool) -> Iterator[None]:
    """Every Engram layer's ``wkv`` zero while inside (``removed``), restored after."""
    from sglang.srt.layers.engram import Engram

    layers = [m for m in model.modules() if isinstance(m, Engram)] if removed else []
    kept = [layer.wkv.weight.data.clone() for layer in layers]
    for layer in layers:
        layer.wkv.weight.data.zero_()
    try:
        yield
    finally:
        for layer, weight in zip(layers, kept, strict=True):
            layer.wkv.weight.data.copy_(weight)


def _load(model_dir: str, max_total_tokens: int) -> Any:
    from sglang.benchmark import one_batch
    from sglang.srt.entrypoints.engine import _set_envs_and_config
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import PortArgs, prepare_server_args
    from sglang_engram.protocol.server_config import engram_flags

    # NOTE: through SGLang's own parser, so the plugin's flag hook sets what a server
    # of this checkpoint gets on the CPU engine
    server_args = prepare_server_args(
        ["--model-path", model_dir, "--device", "cpu", *engram_flags(offload="hbm"),
         "--max-total-tokens", str(max_total_tokens), "--disable-radix-cache",
         # NOTE: the pool is sized by --max-total-tokens; SGLang still checks the
         # weights leave that fraction of free host memory, which beside servers
         # starting on a shared machine can be short
         "--mem-fraction-static", "0.95"]
    )  # fmt: skip
    server_args.resolve_once()
    _set_envs_and_config(server_args)
    port_args = PortArgs.init_new(server_args)
    publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))
    one_batch._init_process_global_configs()
    runner, _ = one_batch.load_model(server_args, port_args, 0, 0)
    return runner


def generate(
    model_dir: str, prompts: list[list[int]], new_tokens: int, regimes: list[str]
) -> dict[str, list[list[int]]]:
    """Per regime, each prompt's ``new_tokens`` greedy tokens, one prompt at a time (as a
    server that serves one request at a time batches them), from one loaded model."""
    # NOTE: in the launcher's order: its parser module, then the plugins (the plugin's
    # sgl_kernel stand-in and hooks), then the rest of SGLang
    import sglang.srt.server_args  # noqa: F401
    from sglang.srt.plugins import load_plugins

    load_plugins()
    assert set(regimes) <= set(REGIMES), regimes
    runner = _load(model_dir, max_total_tokens=MAX_TOTAL_TOKENS)
    return {regime: _greedy(runner, prompts, new_tokens, regime) for regime in regimes}


def _greedy(runner: Any, prompts: list[list[int]], new_tokens: int, regime: str) -> list[list[int]]:
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    model = runner.torch_runner.model
    out = []
    for index, prompt in enumerate(prompts):
        req = Req(
            rid=str(index),
            origin_input_text="",
            origin_input_ids=array("q", prompt),
            sampling_params=SamplingParams(temperature=0, max_new_tokens=new_tokens),
        )
        req.full_untruncated_fill_ids = req.origin_input_ids
        req.logprob_start_len = -1
        req.extend_end = len(prompt)
        with _engram_removed(model, regime == "none"):
            token, _, batch = runner.extend([req])
        tokens = [int(token[0])]
        with _engram_removed(model, regime != "both"):
            for _ in range(new_tokens - 1):
                token, _ = runner.decode(token, batch)
                tokens.append(int(token[0]))
        runner.clear()
        out.append(tokens)
    return out


def run(
    model: Path, prompts: list[list[int]], new_tokens: int, regimes: list[str], workdir: Path
) -> dict[str, list[list[int]]]:
    """:func:`generate` in a fresh interpreter on the CPU engine (as a scheduler runs);
    its log is ``workdir/reference.log``."""
    from engram_testing.server import server_env

    (workdir / "prompts.json").write_text(json.dumps(prompts))
    command = [
        sys.executable, "-m", "engram_testing.dsv41_reference", str(model),
        str(workdir / "prompts.json"), "--new-tokens", str(new_tokens),
        "--regimes", ",".join(regimes),
    ]  # fmt: skip
    with open(workdir / "reference.log", "w") as log:
        done = subprocess.run(
            command, env=server_env(), stdout=subprocess.PIPE, stderr=log, text=True, timeout=1200
        )
    assert done.returncode == 0, (workdir / "reference.log").read_text()[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        prog="python -m engram_testing.dsv41_reference",
        description="Greedy tokens of a DeepSeek-V4.1 checkpoint from upstream's model, in "
        "this process, with Engram's contribution kept or taken away.",
    )
    parser.add_argument("model", type=directory, help="the checkpoint directory")
    parser.add_argument("prompts", type=existing_file, help="a JSON list of token-id lists")
    parser.add_argument("--new-tokens", type=number(int, at_least=1), required=True)
    parser.add_argument(
        "--regimes", default="both", help=f"comma-separated, of {', '.join(REGIMES)}"
    )
    args = parser.parse_args(argv)
    regimes = args.regimes.split(",")
    if not set(regimes) <= set(REGIMES):
        parser.error(f"--regimes: each one of {', '.join(REGIMES)}, got {args.regimes!r}")

    def body() -> None:
        prompts = json.loads(args.prompts.read_text())
        with torch.no_grad():
            tokens = generate(str(args.model), prompts, args.new_tokens, regimes)
        print("RESULT " + json.dumps(tokens))

    return run_cli(body, args)


if __name__ == "__main__":
    sys.exit(main())
