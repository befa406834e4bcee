"""Train the tiny Engram model, and its no-Engram baseline, on the standard library.

Both models see the same batches for the same number of steps from the same dense
initialisation; the baseline's decoder layers simply have no Engram layer. Training is in
fp32 (the Engram rows too: :class:`TrainableRows`); :func:`export` casts the dense weights
to the released bf16 and quantises the rows to the FP8 row format, into a directory that
:meth:`TinyEngramModel.from_pretrained` and the SGLang plugin load like the random build.

The step count is the deterministic budget (same seed, same machine, same bytes);
``minutes`` only caps the wall time, and a run it stops says so in ``train_report.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from engram.files import atomic_write
from engram.fp8 import quantize_rows
from engram.model.batches import Batches, window_batch
from engram.model.builder import BuildOptions, make_config, model_files, write_model_dir
from engram.model.config import TinyEngramConfig
from engram.model.corpus import Document, split_documents, stdlib_documents, token_stream
from engram.model.modeling import TinyEngramModel, engram_table_names
from engram.model.tokenizer import EOS_TOKEN_ID, train_tokenizer
from engram.placements import Placement
from engram.token_map import build_token_map

REPORT_FILE = "train_report.json"
# NOTE: rows start small, so n-grams training never saw add little noise at inference.
ROW_INIT_STD = 0.1
LN2 = math.log(2.0)


@dataclass(frozen=True)
class TrainOptions:
    """The recipe; both models use all of it."""

    seed: int = 0
    steps: int = 800
    batch_size: int = 8
    seq_len: int = 128
    lr: float = 3e-3
    # NOTE: the paper trains the tables faster than the dense weights, without decay.
    engram_lr_mult: float = 5.0
    weight_decay: float = 0.01
    warmup_steps: int = 50
    vocab_size: int = 2000
    eval_tokens: int = 32768
    threads: int = 2
    minutes: float | None = 20.0
    log_every: int = 25
    device: str = "cpu"
    build: BuildOptions = BuildOptions()

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def lr_at(self, step: int) -> float:
        """Linear warm-up, then cosine decay to a tenth."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        done = (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps)
        return self.lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * min(1.0, done))))


class TrainableRows(nn.Module):
    """An Engram table in fp32 with gradients, standing where a placement's table goes."""

    # NOTE: not registered: a placement for training only, never served
    declaration = Placement("train", "fp32 rows with gradients")
    placement = declaration.name

    def __init__(self, rows: torch.Tensor):
        super().__init__()
        self.rows = nn.Parameter(rows)

    def lookup(self, row_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(row_ids, self.rows)

    def close(self) -> None:
        pass


def new_model(
    cfg: TinyEngramConfig, token_map: torch.Tensor, seed: int, engram: bool
) -> TinyEngramModel:
    """fp32 model to train. The dense weights depend on ``seed`` only (identical for the
    Engram model and the baseline); the Engram weights come from a second stream."""
    dense_gen = torch.Generator().manual_seed(seed)
    engram_gen = torch.Generator().manual_seed(seed + 1)
    tables = {
        layer: TrainableRows(
            ROW_INIT_STD
            * torch.randn(cfg.engram_num_embeddings[i], cfg.engram_head_dim, generator=engram_gen)
        )
        for i, layer in enumerate(cfg.engram_layer_ids)
    }
    model = TinyEngramModel(cfg, tables, token_map)  # type: ignore[arg-type]
    if not engram:
        for layer in model.model.layers:
            layer.engram = None
    for name, p in sorted(model.named_parameters()):
        gen = engram_gen if ".engram." in name else dense_gen
        p.requires_grad_(True)
        with torch.no_grad():
            if ".table.rows" in name:
                continue
            if "norm" in name or name.endswith(("q_weight", "k_weight")):
                p.fill_(1.0)
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
    return model


def bits_per_token(model: TinyEngramModel, stream: torch.Tensor, opts: TrainOptions) -> float:
    """Mean next-token loss in bits over consecutive windows of ``stream``."""
    usable = min(stream.numel() - 1, opts.eval_tokens)
    starts = list(range(0, usable - opts.seq_len + 1, opts.seq_len)) or [0]
    seq_len = min(opts.seq_len, usable)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(starts), opts.batch_size):
            ids, targets, rows = window_batch(
                stream, starts[i : i + opts.batch_size], seq_len, model.hasher
            )
            loss = _loss(model, ids, targets, rows, opts.device, reduction="sum")
            total, count = total + float(loss), count + targets.numel()
    return total / count / LN2


def _loss(
    model: TinyEngramModel,
    ids: torch.Tensor,
    targets: torch.Tensor,
    rows: torch.Tensor,
    device: str,
    reduction: str = "mean",
) -> torch.Tensor:
    positions = torch.arange(ids.shape[-1], device=device)
    logits = model.run(ids.to(device), positions, rows.to(device))
    return F.cross_entropy(
        logits.flatten(0, -2).float(), targets.to(device).flatten(), reduction=reduction
    )


@dataclass
class RunResult:
    steps: int
    seconds: float
    stopped_early: bool
    final_loss: float


def train_one(
    model: TinyEngramModel,
    stream: torch.Tensor,
    opts: TrainOptions,
    name: str,
    max_steps: int,
    log: Callable[[str], None],
) -> RunResult:
    """Train ``model`` in place for ``max_steps`` steps (or until the time cap)."""
    model.to(opts.device).train()
    tables = [p for n, p in model.named_parameters() if ".table.rows" in n]
    dense = [p for n, p in model.named_parameters() if ".table.rows" not in n]
    groups = [{"params": dense, "weight_decay": opts.weight_decay, "mult": 1.0}]
    if tables:
        groups.append({"params": tables, "weight_decay": 0.0, "mult": opts.engram_lr_mult})
    optim = torch.optim.AdamW(groups, lr=opts.lr, betas=(0.9, 0.95))
    batches = Batches(
        stream,
        model.hasher,
        seq_len=opts.seq_len,
        batch_size=opts.batch_size,
        seed=opts.seed + 2,
    )
    cap = None if opts.minutes is None else opts.minutes * 60.0 / 2
    start = last = time.perf_counter()
    step, loss_value, stopped = 0, float("nan"), False
    while step < max_steps:
        if cap is not None and time.perf_counter() - start > cap:
            stopped = True
            break
        for group in optim.param_groups:
            group["lr"] = opts.lr_at(step) * group["mult"]
        loss = _loss(model, *batches.next(), opts.device)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(dense, 1.0)
        optim.step()
        step += 1
        loss_value = float(loss.detach())
        if step % opts.log_every == 0 or step == max_steps:
            now = time.perf_counter()
            rate = opts.log_every * opts.tokens_per_step / max(now - last, 1e-9)
            log(
                f"[{name}] step {step}/{max_steps} loss {loss_value / LN2:.3f} bits/token "
                f"{rate:,.0f} tokens/s"
            )
            last = now
    model.eval()
    return RunResult(step, time.perf_counter() - start, stopped, loss_value / LN2)


def export(model: TinyEngramModel, cfg: TinyEngramConfig, tokenizer: str, out: Path) -> None:
    """Released format: bf16 dense weights, FP8 Engram rows."""
    tensors: dict[str, torch.Tensor] = {}
    for name, p in model.state_dict().items():
        if ".table.rows" not in name:
            tensors[name] = p.detach().cpu().to(cfg.dtype).contiguous()
    for layer, table in model.tables.items():
        weight, scale = quantize_rows(table.rows.detach().cpu())  # type: ignore[attr-defined]
        weight_name, scale_name = engram_table_names(layer)
        tensors[weight_name] = weight.view(torch.float8_e4m3fn)
        tensors[scale_name] = scale.view(torch.float8_e8m0fnu)
    write_model_dir(out, cfg, tensors, tokenizer)


def train(
    out: str | Path,
    opts: TrainOptions,
    docs: Sequence[Document] | None = None,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> dict[str, object]:
    """Train both models on ``docs`` (default: the stdlib corpus), write the Engram model to
    ``out`` with ``train_report.json``; returns the report."""
    from tokenizers import Tokenizer

    torch.manual_seed(opts.seed)
    torch.set_num_threads(opts.threads)
    if opts.device != "cpu":
        # NOTE: cuBLAS is deterministic only with a fixed workspace (set before its first use).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=opts.device != "cpu")
    began = time.perf_counter()
    docs = list(docs) if docs is not None else stdlib_documents()
    train_docs, held = split_documents(docs, "train"), split_documents(docs, "heldout")
    text = train_tokenizer(vocab_size=opts.vocab_size, texts=(d.text for d in train_docs))
    tokenizer = Tokenizer.from_str(text)
    train_ids = token_stream(tokenizer, train_docs, EOS_TOKEN_ID)
    held_ids = token_stream(tokenizer, held, EOS_TOKEN_ID)
    log(
        f"corpus: {len(train_docs)} train documents ({train_ids.numel():,} tokens), "
        f"{len(held)} held-out ({held_ids.numel():,} tokens)"
    )
    token_map, compressed = build_token_map(tokenizer)
    cfg = make_config(opts.build, token_map.numel(), compressed)
    train_cfg = dataclasses.replace(cfg, torch_dtype="float32")

    report: dict[str, object] = {"seed": opts.seed, "options": _options_dict(opts)}
    results, bits = {}, {}
    steps = opts.steps
    for name, engram in (("engram", True), ("baseline", False)):
        model = new_model(train_cfg, token_map, opts.seed, engram)
        results[name] = train_one(model, train_ids, opts, name, steps, log)
        # NOTE: the baseline gets exactly the Engram model's token budget.
        steps = results[name].steps
        bits[name] = bits_per_token(model.cpu(), held_ids, dataclasses.replace(opts, device="cpu"))
        log(f"[{name}] held-out {bits[name]:.4f} bits/token")
        if engram:
            export(model, cfg, text, Path(out))
    report.update(
        heldout_bits_per_token=bits,
        tokens_seen={k: r.steps * opts.tokens_per_step for k, r in results.items()},
        steps={k: r.steps for k, r in results.items()},
        stopped_early={k: r.stopped_early for k, r in results.items()},
        train_seconds={k: round(r.seconds, 1) for k, r in results.items()},
        wall_seconds=round(time.perf_counter() - began, 1),
        corpus={
            "train_tokens": train_ids.numel(),
            "heldout_tokens": held_ids.numel(),
            "heldout_documents": [d.name for d in held],
        },
    )
    atomic_write(Path(out) / REPORT_FILE, (json.dumps(report, indent=1) + "\n").encode())
    log(f"wrote {out}: " + ", ".join(f"{p.name} {s:,} B" for p, s in model_files(out).items()))
    return report


def _options_dict(opts: TrainOptions) -> dict[str, object]:
    out = dataclasses.asdict(opts)
    out["build"]["engram_layer_ids"] = list(opts.build.engram_layer_ids)
    return out
