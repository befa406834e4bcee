"""ssd lookups as eager breaks inside CUDA-graph-captured decode steps (GPU check).

A synthetic greedy decode loop shaped like DeepSeek-V4.1's (many small layers, Engram
lookups at two of them), whose token ids feed back into the next step's static input
buffer: the first segment hashes the tokens into row ids on the device, a break looks
the rows up in the table (files on the host for ``ssd``) and writes them into a fixed
buffer, the next segment reads it. It runs the loop

  * eagerly with a ``dram`` table (the reference tokens),
  * eagerly with an ``ssd`` table,
  * as replays of captured segments with the ``ssd`` table (and with ``dram``),

checks that every run decodes the reference tokens (a replay that read stale rows
would diverge), and times a decode step with and without graphs. The segments are
SGLang's breakable CUDA graph (``BreakableCUDAGraphCapture``, the lookups marked
``eager_on_graph``) when SGLang is installed, else a stand-in of it here: one
``torch.cuda.CUDAGraph`` per segment and the break called between replays. The last
line is JSON; exit 1 if any run's tokens differ. Without a GPU only the eager runs
are compared (a smoke test of the script).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / p) for p in ("", "sgl-kernel")]

from engram.fp8 import quantize_rows  # noqa: E402
from engram.tables import EngramTable, create_table  # noqa: E402

COLS = 24  # rows per token per Engram layer, as DeepSeek-V4.1's
ENGRAM_LAYERS = (1, 14)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=400_000, help="table rows (default 400,000)")
    p.add_argument("--batch", type=int, default=64, help="decode batch (default 64)")
    p.add_argument("--steps", type=int, default=48, help="decode steps per run (default 48)")
    p.add_argument("--layers", type=int, default=40, help="layers per step (default 40)")
    p.add_argument("--hidden", type=int, default=1024, help="hidden size (default 1024)")
    p.add_argument("--head-dim", type=int, default=256, help="row width (default 256)")
    p.add_argument("--vocab", type=int, default=4096, help="vocabulary (default 4096)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args()


class DecodeStep:
    """One greedy decode step over static buffers: ``tokens`` [B] in, ``tokens`` out."""

    def __init__(self, args: argparse.Namespace, table: EngramTable, device: torch.device):
        g = torch.Generator().manual_seed(7)
        d, h = args.head_dim, args.hidden

        def param(*shape: int) -> torch.Tensor:
            w = torch.randn(*shape, generator=g) / shape[0] ** 0.5
            return w.to(device, torch.bfloat16)

        self.table, self.rows = table, args.rows
        self.embed = param(args.vocab, h)
        self.layers = [param(h, h) for _ in range(args.layers)]
        self.wkv = {layer: param(COLS * d, h) for layer in ENGRAM_LAYERS}
        self.head = param(h, args.vocab)
        self.mult = torch.randint(1, 2**31, (COLS,), generator=g).to(device)
        self.tokens = torch.randint(3, args.vocab, (args.batch,), generator=g).to(device)
        self.out = {
            layer: torch.empty(args.batch, COLS, d, dtype=torch.bfloat16, device=device)
            for layer in ENGRAM_LAYERS
        }
        self.lookup_into: Callable[[torch.Tensor, torch.Tensor], None] = self.lookup

    def lookup(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        """The break: the table's rows of ``ids`` into ``out`` (host reads for ssd)."""
        out.copy_(self.table.lookup(ids))

    def __call__(self) -> None:
        x = self.embed[self.tokens]
        for i, w in enumerate(self.layers):
            if i in self.out:
                # stand-in hash on the device: a layer's row ids from this step's tokens
                ids = (self.tokens.unsqueeze(1) * self.mult + i) % self.rows
                self.lookup_into(ids, self.out[i])  # a graph break when captured
                x = x + (self.out[i].flatten(1) @ self.wkv[i]).sigmoid()
            x = x + torch.nn.functional.gelu(x @ w)
        self.tokens.copy_((x @ self.head).argmax(-1))


def decode(step: DecodeStep, steps: int, run: Callable[[], None]) -> tuple[list[list[int]], float]:
    """``steps`` greedy steps by ``run`` from the step's current tokens (restored after):
    each step's tokens, and the seconds per step."""
    start, seen = step.tokens.clone(), []
    sync(step)
    t0 = time.perf_counter()
    for _ in range(steps):
        run()
        seen.append(step.tokens.tolist())
    sync(step)
    step.tokens.copy_(start)
    return seen, (time.perf_counter() - t0) / steps


def graphed(step: DecodeStep, steps: int) -> tuple[list[list[int]], float, str]:
    """Capture one step as segments around the lookups, then replay ``steps`` times."""
    start = step.tokens.clone()
    replay, harness = capture(step)
    step.tokens.copy_(start)
    return (*decode(step, steps, replay), harness)


def capture(step: DecodeStep) -> tuple[Callable[[], None], str]:
    for _ in range(2):  # warm up on a side stream, as graph capture wants
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()
        torch.cuda.current_stream().wait_stream(stream)
    try:
        from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
            BreakableCUDAGraph,
            BreakableCUDAGraphCapture,
            eager_on_graph,
        )
    except ImportError:
        return capture_stand_in(step), "stand-in segments (no SGLang here)"
    graph = BreakableCUDAGraph()
    # NOTE: at capture the segments are only recorded: the ids hold nothing yet, so the
    # break does nothing then (as the plugin's lookup breaks do)
    step.lookup_into = eager_on_graph(step.lookup, capture_stub=lambda ids, out: None)
    pool = torch.cuda.graph_pool_handle()
    with BreakableCUDAGraphCapture(graph, pool=pool, stream=torch.cuda.Stream()):
        step()
    torch.cuda.synchronize()
    return graph.replay, "SGLang's BreakableCUDAGraph"


def capture_stand_in(step: DecodeStep) -> Callable[[], None]:
    """Segments as plain CUDA graphs, the lookups called between their replays."""
    segments: list[torch.cuda.CUDAGraph] = []
    breaks: list[Callable[[], None]] = []
    stream = torch.cuda.Stream()
    pool = torch.cuda.graph_pool_handle()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        graph.capture_begin(pool=pool)

        def split(ids: torch.Tensor, out: torch.Tensor) -> None:
            nonlocal graph
            graph.capture_end()
            segments.append(graph)
            # NOTE: not run now: the captured segment has not run, so ids hold nothing
            breaks.append(lambda: step.lookup(ids, out))
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(pool=pool)

        step.lookup_into = split
        step()
        graph.capture_end()
        segments.append(graph)
    torch.cuda.synchronize()

    def replay() -> None:
        for i, seg in enumerate(segments):
            seg.replay()
            if i < len(breaks):
                breaks[i]()

    return replay


def sync(step: DecodeStep) -> None:
    if step.tokens.is_cuda:
        torch.cuda.synchronize()


def main() -> int:
    args = parse_args()
    device = torch.device(args.device)
    values = torch.randn(args.rows, args.head_dim) * torch.exp2(
        torch.randint(-6, 7, (args.rows, 1)).float()
    )
    weight, scale = quantize_rows(values)
    report: dict[str, object] = {"device": str(device), "rows": args.rows, "batch": args.batch}
    with tempfile.TemporaryDirectory() as tmp:
        tables = {
            "dram": create_table("dram", weight, scale, device=device),
            "ssd": create_table(
                "ssd", weight, scale, device=device, path=Path(tmp) / "t", ram_cache_bytes=1 << 26
            ),
        }
        runs: dict[str, list[list[int]]] = {}
        for name, table in tables.items():
            step = DecodeStep(args, table, device)
            runs[f"{name} eager"], report[f"{name}_eager_step_ms"] = decode(step, args.steps, step)
            if device.type == "cuda":
                seen, t, harness = graphed(step, args.steps)
                runs[f"{name} graphs"], report[f"{name}_graph_step_ms"] = seen, t
                report["harness"] = harness
        for table in tables.values():
            table.close()
    want = runs["dram eager"]
    report["tokens_equal_dram"] = {name: seen == want for name, seen in runs.items()}
    for key, value in list(report.items()):
        if key.endswith("_ms"):
            report[key] = round(float(value) * 1e3, 3)
    if device.type == "cuda":
        report["ssd_graph_speedup"] = round(
            report["ssd_eager_step_ms"] / report["ssd_graph_step_ms"], 3
        )
    else:
        report["graphs"] = "skipped: no GPU"
    print(json.dumps(report))
    return 0 if all(report["tokens_equal_dram"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
