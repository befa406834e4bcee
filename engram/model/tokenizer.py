"""The tiny model's tokenizer: a byte-level BPE committed under ``engram/assets``.

The asset was trained once with :func:`train_tokenizer` (see ``engram/assets/README.md``
for the exact command and corpus); the builder copies its bytes, so every build writes an
identical ``tokenizer.json`` without needing the corpus.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from engram.errors import EngramConfigError

ASSET = Path(__file__).resolve().parent.parent / "assets" / "tiny_tokenizer.json"
SPECIAL_TOKENS = ("<|bos|>", "<|eos|>", "<|pad|>")
BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID = 0, 1, 2


def train_tokenizer(
    files: Sequence[str | Path] = (), vocab_size: int = 2000, texts: Iterable[str] = ()
) -> str:
    """Train a byte-level BPE on ``files`` and ``texts``; returns its ``tokenizer.json``.

    The special tokens take ids 0, 1, 2 (bos, eos, pad); all 256 byte symbols are in
    the vocabulary, so any text encodes.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    if files:
        tokenizer.train([str(f) for f in files], trainer)
    else:
        tokenizer.train_from_iterator(texts, trainer)
    return tokenizer.to_str()


def asset_bytes() -> bytes:
    return ASSET.read_bytes()


def tokenizer_config(max_length: int) -> dict[str, Any]:
    """``tokenizer_config.json`` that lets transformers load the tokenizer."""
    bos, eos, pad = SPECIAL_TOKENS
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "pad_token": pad,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
    }


def load_tokenizer(model_dir: str | Path) -> Any:
    """The ``tokenizers.Tokenizer`` of a model directory (no transformers import)."""
    from tokenizers import Tokenizer

    from engram.model.directory import model_file

    path = model_file(model_dir, "tokenizer.json")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exceptions
        raise EngramConfigError(f"{path} is not a tokenizer ({exc})") from None
