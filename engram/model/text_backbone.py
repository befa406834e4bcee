"""The bundled trained model with Engram tables of a chosen size
(``python -m engram.model build --text-backbone --engram-table-gib G``).

The random model's decode writes random tokens, whose rows no cache fed from text can
predict; a deployment's model writes text. This build keeps everything the trained model
learned (its tokenizer, every dense weight bit for bit, the Engram gates and
projections) and gives it tables of about G GiB whose rows are its trained rows,
placed where the larger hash sends the n-grams of its training text
(:mod:`engram.model.text_tables`), so it writes what the trained model writes. The
pairing reads this interpreter's standard library (the trained model's training split),
so the build record names that text by its digest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from engram.errors import EngramConfigError
from engram.hashing import NgramHasher
from engram.model import large_tables
from engram.model.builder import BUILD_RECORD, TRAINED_MODEL, model_files, write_model_dir
from engram.model.config import TinyEngramConfig
from engram.model.corpus import Document, encode_documents, split_documents, stdlib_documents
from engram.model.modeling import WEIGHTS_FILE, engram_table_names
from engram.model.safetensors_stream import StreamedTensor
from engram.model.text_tables import RowSources, pair_rows, row_chunks
from engram.model.tokenizer import load_tokenizer
from engram.primes import prime_layout
from engram.token_map import build_token_map

REPORT_FILE = "text_tables.json"
CORPUS_SPLIT = "train"


@dataclass(frozen=True)
class TextBackboneOptions:
    """What ``build --text-backbone`` varies: only the tables' size."""

    engram_table_gib: float

    def __post_init__(self) -> None:
        if not self.engram_table_gib > 0:
            raise EngramConfigError(
                f"engram_table_gib must be > 0 GiB, got {self.engram_table_gib:g}"
            )


def text_backbone_config(
    trained: TinyEngramConfig, options: TextBackboneOptions
) -> TinyEngramConfig:
    """``trained`` with tables of about ``options.engram_table_gib`` GiB: only the prime
    search start (``engram_vocab_size``) and the table sizes change."""
    n_cols = (trained.engram_max_ngram_size - 1) * trained.engram_n_heads
    start = large_tables.vocab_for_table_gib(
        options.engram_table_gib, len(trained.engram_layer_ids), n_cols, trained.engram_head_dim
    )
    primes = prime_layout(
        len(trained.engram_layer_ids),
        trained.engram_max_ngram_size,
        trained.engram_n_heads,
        start,
    )
    rows = tuple(sum(sum(order) for order in layer) for layer in primes)
    return dataclasses.replace(trained, engram_num_embeddings=rows, engram_vocab_size=start)


def build_text_backbone(out: str | Path, options: TextBackboneOptions) -> dict[Path, int]:
    """Write the model directory ``out``; returns each model file and its size."""
    # NOTE: a record left by an earlier build would vouch for files half rewritten.
    (Path(out) / BUILD_RECORD).unlink(missing_ok=True)
    trained_cfg = TinyEngramConfig.from_pretrained(TRAINED_MODEL)
    cfg = text_backbone_config(trained_cfg, options)
    tokenizer = load_tokenizer(TRAINED_MODEL)
    token_map, _ = build_token_map(tokenizer)
    pad = trained_cfg.engram_pad_token_id
    docs = _training_documents()
    sources = pair_rows(
        NgramHasher(trained_cfg.spec, token_map, pad),
        NgramHasher(cfg.spec, token_map, pad),
        encode_documents(tokenizer, docs),
        trained_cfg.engram_num_embeddings,
    )
    with safe_open(str(TRAINED_MODEL / WEIGHTS_FILE), framework="pt") as f:
        dense = [StreamedTensor.of(k, f.get_tensor(k)) for k in sorted(f.keys())]
        dense = [t for t in dense if ".engram.embed." not in t.name]
        tables = _table_tensors(f, cfg, sources)
    write_model_dir(out, cfg, dense + tables, (TRAINED_MODEL / "tokenizer.json").read_text())
    report = {
        "corpus_documents": len(docs),
        "rows": list(cfg.engram_num_embeddings),
        "rows_copied_for_text": [sources.mapped(i) for i in range(len(cfg.engram_layer_ids))],
    }
    (Path(out) / REPORT_FILE).write_text(json.dumps(report, indent=1) + "\n")
    # NOTE: written last: its presence says the build above completed.
    record = json.dumps(build_record(options, docs), indent=1, sort_keys=True)
    (Path(out) / BUILD_RECORD).write_text(record)
    return model_files(out)


def _table_tensors(f: Any, cfg: TinyEngramConfig, sources: RowSources) -> list[StreamedTensor]:
    """Each larger table's rows and scales, streamed from the trained ones (in memory:
    they are small)."""
    out = []
    for index, layer in enumerate(cfg.engram_layer_ids):
        rows = cfg.engram_num_embeddings[index]
        for name in engram_table_names(layer):
            trained = f.get_tensor(name)
            raw = trained.view(torch.uint8).numpy()
            out.append(
                StreamedTensor(
                    name,
                    trained.dtype,
                    (rows, raw.shape[1]),
                    lambda i=index, ly=layer, r=rows, t=raw: row_chunks(sources, i, ly, t, r),
                )
            )
    return out


def _training_documents() -> list[Document]:
    return split_documents(stdlib_documents(), CORPUS_SPLIT)


def build_record(options: TextBackboneOptions, docs: list[Document]) -> dict[str, object]:
    """What a build depends on: the size, the trained weights and tokenizer, the text."""
    corpus = hashlib.sha256()
    for doc in docs:
        corpus.update(f"{len(doc.name)}:{doc.name}{len(doc.text)}:".encode())
        corpus.update(doc.text.encode("utf-8", errors="replace"))
    return {
        "text_backbone": dataclasses.asdict(options),
        "trained_sha256": _file_sha256(TRAINED_MODEL / WEIGHTS_FILE),
        "tokenizer_sha256": _file_sha256(TRAINED_MODEL / "tokenizer.json"),
        "corpus_sha256": corpus.hexdigest(),
    }


def built_text_backbone(out: str | Path, options: TextBackboneOptions) -> bool:
    """Is ``out`` a complete text-backbone build from exactly these inputs?"""
    try:
        found = json.loads((Path(out) / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return False
    return found == build_record(options, _training_documents())


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
